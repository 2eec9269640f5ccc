"""What Ascend's TF2 scripts (run without ``--tf1``) read from TensorFlow 2.4 that later versions
dropped: ``Graph._last_id``, the op seed of their ``npu_ops.py`` dropout under a global seed."""
import json
import os
import subprocess
import sys

import tensorflow as tf

from npu_loss_scale import detection, emulation
from npu_loss_scale.ascend import tf1

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "scripts", "ascend_tf2_seeded_dropout", "train.py")


def test_graph_last_id_counts_the_operations_added_as_tf_2_4_did():
    tf1.add_graph_last_id()
    tf1.add_graph_last_id()  # idempotent
    graph = tf.Graph()
    assert graph._last_id == 0  # pylint: disable=protected-access
    with graph.as_default():
        x = tf.constant(1.0)
        assert graph._last_id == 1  # pylint: disable=protected-access
        tf.add(x, x)
        assert graph._last_id == 2  # pylint: disable=protected-access

    seen = []

    @tf.function
    def step(v):
        seen.append(tf.compat.v1.get_default_graph()._last_id)  # pylint: disable=protected-access
        w = v * 2.0
        seen.append(tf.compat.v1.get_default_graph()._last_id)  # pylint: disable=protected-access
        return w

    step(tf.constant(1.0))
    assert seen[1] == seen[0] + 2  # the constant 2.0 and the multiplication


def test_a_tf2_script_whose_dropout_seeds_from_graph_last_id_trains(tmp_path):
    """Before: AttributeError: 'FuncGraph' object has no attribute '_last_id' when ``fit`` built
    the dropout; now it trains 2 steps through NpuLossScaleOptimizer with op seed _last_id."""
    env = dict(os.environ)
    for name in (detection.ENV_VAR, emulation.MODE_ENV_VAR, "RANK_SIZE",
                 "NPU_LOSS_SCALE_EMULATE_REPORT"):
        env.pop(name, None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["PYTHONPATH"] = REPO
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--report", str(report),
                          SCRIPT], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    seeds = json.loads(out.stdout.strip().splitlines()[-1])["seeds"]
    assert seeds and all(graph_seed == 1234 and op_seed > 0 for graph_seed, op_seed in seeds)
    steps = json.loads(report.read_text())
    assert steps["steps_applied"] + steps["steps_skipped"] == 2
