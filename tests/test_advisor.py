"""Loss-scale advisor: its scale is the largest power of two that the observed steps take."""
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.tools import advisor
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import localisation
from npu_loss_scale.device import saturation


@pytest.fixture(autouse=True)
def _clean_localisation():
    localisation.reset()
    yield
    localisation.disable()
    localisation.reset()


SIGNATURE = {"x": tf.TensorSpec([4, 8], tf.float16)}


def _mlp(x):
    """Two float16 dense layers; the loss is float32, as in mixed precision."""
    w1 = tf.compat.v1.get_variable("w1", initializer=tf.random.stateless_uniform(
        [8, 16], seed=[1, 2], minval=-1.0, maxval=1.0))
    w2 = tf.compat.v1.get_variable("w2", initializer=tf.random.stateless_uniform(
        [16, 4], seed=[3, 4], minval=-1.0, maxval=1.0))
    h = tf.nn.relu(tf.matmul(x, tf.cast(w1, tf.float16), name="dense1"))
    out = tf.matmul(h, tf.cast(w2, tf.float16), name="dense2")
    return tf.reduce_mean(tf.square(tf.cast(out, tf.float32)))


def _batches():
    rng = np.random.RandomState(0)
    return [{"x": (rng.randn(4, 8) * scale).astype(np.float16)} for scale in (1.0, 3.0, 0.5)]


def _skipped_steps(model_fn, batches, loss_scale):
    """Runs the model under a fixed loss scale on every batch (weights never change); returns
    how many steps the emulated device overflowed on. Shares nothing with the advisor."""
    with tf.Graph().as_default():
        with saturation.saturate_every_op():
            x = tf.compat.v1.placeholder(tf.float16, [4, 8], name="x")
            loss = model_fn(x)
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.0),
                                            nls.FixedLossScaleManager(loss_scale))
            train = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for batch in batches:
                sess.run(train, {x: batch["x"]})
            return int(sess.run(opt.skipped_steps))


def test_advised_scale_is_the_largest_power_of_two_without_an_overflow_on_the_observed_steps():
    batches = _batches()
    advice = advisor.advise_model(_mlp, batches, SIGNATURE)
    scale = advice.init_loss_scale
    assert advice.observed_steps == len(batches) and advice.float32_layers == []
    assert 1.0 <= scale < advisor.DEFAULT_MAX_SCALE       # limited by a layer, not the cap
    assert math.log2(scale) == int(math.log2(scale))
    assert _skipped_steps(_mlp, batches, scale) == 0
    assert _skipped_steps(_mlp, batches, 2.0 * scale) > 0
    limiting = [layer for layer in advice.layers if layer.name == advice.limiting_layer]
    assert limiting and limiting[0].max_safe_scale == scale
    assert all(layer.max_safe_scale is None or layer.max_safe_scale >= scale
               for layer in advice.layers)


def test_a_layer_that_overflows_forward_whatever_the_scale_is_named_for_float32():
    def model(x):
        w = tf.compat.v1.get_variable("w", initializer=tf.ones([8, 8]))
        h = tf.matmul(x, tf.cast(w, tf.float16), name="dense")
        big = tf.exp(h, name="energy")          # exp(8 * 2) = 8.9e6: beyond float16
        return tf.reduce_mean(tf.cast(h, tf.float32)) + 1e-9 * tf.reduce_mean(
            tf.cast(big, tf.float32))
    batches = [{"x": np.full([4, 8], 2.0, np.float16)}]
    advice = advisor.advise_model(model, batches, SIGNATURE)
    assert advice.float32_layers == ["energy"]
    by_name = {layer.name: layer for layer in advice.layers}
    assert by_name["energy"].forward_overflow and not by_name["dense"].forward_overflow
    assert by_name["dense"].forward_max == 16.0
    text = advice.report()
    assert "keep them in float32" in text and "energy" in text and "keep_dtype_scope" in text


def test_gradients_observed_at_a_fixed_scale_are_unscaled_before_advising():
    batches = _batches()
    at_one = advisor.advise_model(_mlp, batches, SIGNATURE, loss_scale=1.0)
    at_64 = advisor.advise_model(_mlp, batches, SIGNATURE, loss_scale=64.0)
    assert at_64.init_loss_scale == at_one.init_loss_scale
    grads_one = {l.name: l.gradient_max for l in at_one.layers}
    for layer in at_64.layers:
        if layer.gradient_max:
            assert layer.gradient_max == pytest.approx(grads_one[layer.name], rel=2e-3)


def test_advise_rejects_a_loss_scale_that_is_not_positive():
    with pytest.raises(ValueError, match="loss_scale must be"):
        advisor.advise(observations=[], observed_steps=0, loss_scale=0.0)


def test_layer_of_maps_gradient_ops_to_their_forward_op():
    assert advisor.layer_of("gradients/dense1_grad/MatMul_1") == "dense1"
    assert advisor.layer_of("model/gradients_2/model/dense/MatMul_grad/MatMul") == \
        "model/model/dense/MatMul"
    assert advisor.layer_of("bert/encoder/layer_0/output/dense/BiasAdd") == \
        "bert/encoder/layer_0/output/dense/BiasAdd"


SCRIPT = textwrap.dedent('''
    import numpy as np
    import tensorflow as tf
    from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
    from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager
    tf.compat.v1.disable_eager_execution()
    x = tf.compat.v1.placeholder(tf.float16, [2, 4], name="x")
    w = tf.compat.v1.get_variable("w", initializer=tf.eye(4) * 4.0)
    logits = tf.matmul(x, tf.cast(w, tf.float16), name="logits")
    e = tf.exp(logits, name="big_exp")
    loss = tf.reduce_mean(tf.cast(logits, tf.float32)) + tf.stop_gradient(
        tf.reduce_mean(tf.cast(e, tf.float32)))
    opt = NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.0),
                                FixedLossScaleManager(4.0))
    train = opt.minimize(loss)
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for k in (1.0, 3.0):
            sess.run(train, {x: np.full([2, 4], k, np.float16)})
''')


def test_emulate_advise_observes_a_script_and_writes_the_advice(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    out = tmp_path / "advice.json"
    env = dict(os.environ)
    env.pop(emulation.MODE_ENV_VAR, None)
    env[detection.ENV_VAR] = "emulation"
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    done = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--saturate-every-op",
                           "--advise", str(out), "--advise-loss-scale", "4", str(script)],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    advice = json.loads(out.read_text())
    assert advice["observed_steps"] == 2 and advice["observed_loss_scale"] == 4.0
    assert advice["float32_layers"] == ["big_exp"]
    # the largest unscaled gradient: d loss / d w = x^T (1/8) = 2 rows * 3 / 8 = 0.75 at x = 3;
    # 0.75 * 2**16 = 49152 fits float16, 0.75 * 2**17 does not
    assert advice["init_loss_scale"] == 2.0 ** 16
    assert "recommended init_loss_scale = 65536 (2**16)" in done.stderr
