"""TF1 mode's ``tf.contrib.tpu``: BERT-style scripts build a ``TPUEstimator(use_tpu=False)`` with
contrib's RunConfig/TPUConfig and train through NPULossScaleOptimizer inside its model_fn."""
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

_SCRIPT = r'''
from npu_bridge.npu_init import *
import json
import numpy as np
import tensorflow as tf

flags = tf.flags
flags.DEFINE_string("output_dir", None, "")
FLAGS = flags.FLAGS


def model_fn(features, labels, mode, params):
    w = tf.get_variable("w", [], initializer=tf.constant_initializer(1.0))
    loss = tf.reduce_mean(w * features["x"])
    manager = FixedLossScaleManager(loss_scale=2 ** 20)
    opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.5), manager)
    train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
    return tf.contrib.tpu.TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)


def input_fn(params):
    xs = np.array([1.0, 1e34, 2.0], np.float32)
    return tf.data.Dataset.from_tensor_slices({"x": xs}).batch(params["batch_size"])


def main(_):
    run_config = tf.contrib.tpu.RunConfig(
        model_dir=FLAGS.output_dir, save_checkpoints_steps=10,
        tpu_config=tf.contrib.tpu.TPUConfig(
            iterations_per_loop=1, num_shards=8,
            per_host_input_for_training=tf.contrib.tpu.InputPipelineConfig.PER_HOST_V2))
    estimator = tf.contrib.tpu.TPUEstimator(
        use_tpu=False, model_fn=model_fn, config=npu_run_config_init(run_config=run_config),
        train_batch_size=1)
    estimator.train(input_fn=input_fn, max_steps=3, hooks=npu_hooks_append())
    w = tf.train.load_variable(FLAGS.output_dir, "w")
    print(json.dumps({"w": float(w), "cross_shard": tf.contrib.tpu.CrossShardOptimizer.__name__}))


if __name__ == "__main__":
    tf.app.run()
'''


def _run(tmp_path):
    script = tmp_path / "run_tpu_estimator.py"
    script.write_text(_SCRIPT)
    report = tmp_path / "report.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO, RANK_SIZE="1")
    env.pop(detection.ENV_VAR, None)
    env.pop(emulation.MODE_ENV_VAR, None)
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--report",
                             str(report), "--tf1", str(script),
                             "--output_dir=" + str(tmp_path / "out")],
                            env=env, cwd=str(tmp_path), capture_output=True, text=True,
                            timeout=300, check=False)
    return result, report


def _has_estimator():
    try:
        return hasattr(tf.compat.v1.estimator, "tpu")
    except (ImportError, AttributeError):
        return False


@pytest.mark.slow
def test_tf1_contrib_tpu_estimator_trains_through_npu_loss_scale_optimizer(tmp_path):
    """1e34 * 2**20 overflows float32: that step is skipped, the two others apply
    (w = 1 - 0.5 * 1 - 0.5 * 2); with no Estimator (TF > 2.15) the error names what is missing."""
    result, report = _run(tmp_path)
    if not _has_estimator():
        assert result.returncode != 0
        assert "tf.contrib.tpu.RunConfig is TensorFlow's TPU Estimator, which this TensorFlow " \
            "does not have" in result.stderr
        return
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads([l for l in result.stdout.splitlines() if l.startswith("{")][-1])
    assert out == {"w": -0.5, "cross_shard": "CrossShardOptimizer"}
    counts = json.loads(report.read_text())
    assert (counts["steps_applied"], counts["steps_skipped"]) == (2, 1)
