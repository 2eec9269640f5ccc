"""GradScaler on TensorFlow 1.15: it works with eager execution switched on, and a graph built
for a Session is refused at construction, saying what it needs.

On 1.15 the GradScaler test files run in a pytest of their own with eager execution switched
on at start-up (``tests/tf1_eager_plugin.py``; 1.15 cannot switch back, and this process runs
graphs): every one of their tests must pass there, none skipped. On TensorFlow 2 those files
run directly, so that test exists only on 1.15. The refusal is tested on every stack
(``tf.Graph().as_default()`` is graph building on TensorFlow 2 as well).
"""
import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf

import npu_loss_scale as nls
from tf_versions import TF1

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REFUSAL = (r"GradScaler needs eager execution: .*tf\.compat\.v1\.enable_eager_execution\(\) .*"
           r"In a graph, use NPULossScaleOptimizer")


@pytest.mark.parametrize("enabled", [True, False])
def test_a_graph_built_for_a_session_is_refused_saying_what_it_needs(enabled):
    with tf.Graph().as_default():
        with pytest.raises(RuntimeError, match=REFUSAL):
            nls.GradScaler(enabled=enabled)
    if TF1:   # 1.15's default: the global graph
        with pytest.raises(RuntimeError, match=REFUSAL):
            nls.GradScaler()


if TF1:
    # the rules, eagerly and in tf.function (56 tests), and the guard against stepping on scaled
    # gradients (38), which found 1.15's tensors lacking .ref()
    EAGER_FILES = ["test_grad_scaler.py", "test_grad_scaler_torch_habit.py"]

    @pytest.mark.slow
    def test_the_grad_scaler_tests_pass_with_eager_execution_on():
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [HERE, ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        env.pop("NLS_STACK", None)       # no skip is allowed here: the summary is checked
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "tf1_eager_plugin", "-q", "-p",
             "no:cacheprovider"] + [os.path.join(HERE, f) for f in EAGER_FILES],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=1200, check=False)
        summary = result.stdout.strip().splitlines()[-1]
        assert result.returncode == 0, result.stdout[-5000:]
        # all passed, none skipped, failed or in error
        assert re.fullmatch(r"=* ?\d+ passed(, \d+ warnings?)? in [\d.]+s.*", summary), summary
