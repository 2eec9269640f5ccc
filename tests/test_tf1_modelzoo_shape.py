"""A TF1 script in ModelZoo's shape through `python -m npu_loss_scale.emulate`.

On TensorFlow 1.x the script runs as written, with the real ``tensorflow.contrib`` and no TF1 mode
(``--tf1`` is accepted there and changes nothing); on TensorFlow 2.x it needs ``--tf1``. Either way
its steps, global step and loss scale must be those of a NumPy twin of the loss-scale rule.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "scripts", "tf1_modelzoo_shape", "train.py")
TF1 = tf.__version__.startswith("1.")
FEEDS = (1.0, 2.0, 1e34, -3.0)
L2 = 1e-3


def _run(tmp_path, tf1_flag):
    report = tmp_path / "report.json"
    env = dict(os.environ)
    for name in (detection.ENV_VAR, emulation.MODE_ENV_VAR, "RANK_SIZE",
                 "NPU_LOSS_SCALE_EMULATE_REPORT"):
        env.pop(name, None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, "-m", "npu_loss_scale.emulate", "--report", str(report)]
    cmd += ["--tf1"] if tf1_flag else []
    cmd += [SCRIPT, "--feeds=" + ",".join(repr(f) for f in FEEDS), "--l2=%r" % L2]
    result = subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True,
                            timeout=300, check=False)
    lines = [json.loads(l) for l in result.stdout.splitlines() if l.startswith("{")]
    return result, lines, report


def _twin():
    """The steps by hand, in float32: loss w*x + L2*w**2/2, SGD at 0.5, scale 2**20 halved on an
    overflow of the scaled gradient (then nothing is applied and the global step stays)."""
    f32 = np.float32
    w, step, scale = f32(1.0), 0, f32(2.0 ** 20)
    out = []
    for x in FEEDS:
        grad = f32(x) + f32(L2) * w
        with np.errstate(over="ignore"):
            finite = np.isfinite(scale * grad)
        if finite:
            w, step = f32(w - f32(0.5) * grad), step + 1
        else:
            scale = f32(scale * f32(0.5))
        out.append((float(w), step, float(scale)))
    return out


def _check_steps(lines, report):
    got = [(l["w"], l["global_step"], l["loss_scale"]) for l in lines[1:]]
    want = _twin()
    assert [g[1:] for g in got] == [w[1:] for w in want]
    np.testing.assert_allclose([g[0] for g in got], [w[0] for w in want], rtol=1e-6)
    assert json.loads(report.read_text()) == {"optimizers_built": 1, "train_ops_built": 1,
                                              "steps_applied": 3, "steps_skipped": 1}


@pytest.mark.slow
@pytest.mark.parametrize("tf1_flag", [True, False], ids=["tf1", "plain"])
def test_modelzoo_shaped_script_trains_through_the_loss_scale_optimizer(tmp_path, tf1_flag):
    result, lines, report = _run(tmp_path, tf1_flag)
    if not TF1 and not tf1_flag:  # TensorFlow 2 without TF1 mode: the script's first TF1 name
        assert result.returncode != 0 and lines == []
        assert "AttributeError: module 'tensorflow' has no attribute 'app'" in result.stderr
        return
    assert result.returncode == 0, result.stderr[-3000:]
    if TF1:  # TF 1.15's own contrib: the package's optimizer is one of its LossScaleOptimizers
        assert lines[0] == {"contrib_module":
                            "tensorflow.contrib.mixed_precision.python.loss_scale_optimizer",
                            "is_contrib_optimizer": True}
    else:  # TF1 mode's contrib: its LossScaleOptimizer is the package's, checking for inf/NaN
        assert lines[0] == {"contrib_module": "npu_loss_scale.ascend.tf1_contrib",
                            "is_contrib_optimizer": False}
    _check_steps(lines, report)
