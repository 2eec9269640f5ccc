"""Why the emulation matters: in saturation mode only the float-status register sees an overflow.

The same float16 model is trained for one step by TensorFlow's own
MixedPrecisionLossScaleOptimizer (dynamic loss scale, is_finite check) and by
NPULossScaleOptimizer. The model: w = [[1], [1]] (float32 master weights), x = [[1, 1]];
h = saturate(x @ w16) = 2, out = saturate(4 * h) = 8, loss = sum(out). The true gradient is 4 per
weight. With a loss scale of 2**16 the scaled float16 gradient (4 * 65536) overflows:

* saturation mode (Atlas training): the gradient saturates to 65504 on its way back, the weight
  gradient comes out as 65504 / 65536 = 0.99951171875 — finite and wrong. TensorFlow's optimizer
  sees finite gradients and applies the corrupt update; NPULossScaleOptimizer reads the register
  and skips the step.
* INF/NaN mode: the gradient is inf, both optimizers skip.
"""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.device import register as emulation
from tf_versions import tf_mixed_precision

SCALE = 2.0 ** 16
LR = 1.0
CORRUPT_GRAD = 65504.0 / 65536.0  # 0.99951171875, exact in float32


def _tf_optimizer(scale=SCALE):
    return tf_mixed_precision.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR),
        tf_mixed_precision.DynamicLossScale(initial_loss_scale=scale))


def _npu_optimizer(scale=SCALE):
    return nls.NPULossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR),
        nls.ExponentialUpdateLossScaleManager(init_loss_scale=scale, incr_every_n_steps=1000,
                                              decr_every_n_nan_or_inf=1, decr_ratio=0.5),
        backend="emulation")


def _one_step(make_optimizer, scale=SCALE):
    """Builds the model in a fresh graph; returns gradients, register after them, w, global step."""
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.ones([2, 1]), use_resource=True)
        x = tf.ones([1, 2], tf.float16)
        h = nls.saturate(tf.matmul(x, tf.cast(w, tf.float16)))
        out = nls.saturate(tf.constant(4.0, tf.float16) * h)
        loss = tf.reduce_sum(tf.cast(out, tf.float32))
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = make_optimizer(scale)
        grads_and_vars = opt.compute_gradients(loss, [w])
        train_op = opt.apply_gradients(grads_and_vars, global_step=step)
        status = emulation.npu_get_float_status_v2()
        clear = emulation.npu_clear_float_status_v2()
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(clear)
        grads = sess.run(grads_and_vars[0][0]).ravel()
        register = sess.run(status)
        sess.run(train_op)
        return grads, register, sess.run(w).ravel(), int(sess.run(step))


def test_saturation_mode_overflow_is_invisible_to_tensorflow_and_caught_by_the_register():
    tf_grads, tf_register, tf_w, tf_step = _one_step(_tf_optimizer)
    npu_grads, npu_register, npu_w, npu_step = _one_step(_npu_optimizer)

    # The device's view: every gradient is finite, only the register knows.
    for grads, register in ((tf_grads, tf_register), (npu_grads, npu_register)):
        np.testing.assert_array_equal(grads, [CORRUPT_GRAD, CORRUPT_GRAD])
        assert register[0] == 1 and not register[2:].any()

    # TensorFlow's optimizer applies the corrupt update ...
    np.testing.assert_array_equal(tf_w, np.float32(1.0) - np.float32(LR * CORRUPT_GRAD))
    assert tf_step == 1
    # ... NPULossScaleOptimizer skips it.
    np.testing.assert_array_equal(npu_w, [1.0, 1.0])
    assert npu_step == 0


def test_inf_nan_mode_both_optimizers_skip():
    nls.set_device_sat_mode(emulation.INF_NAN)
    tf_grads, tf_register, tf_w, tf_step = _one_step(_tf_optimizer)
    npu_grads, npu_register, npu_w, npu_step = _one_step(_npu_optimizer)
    for grads, register in ((tf_grads, tf_register), (npu_grads, npu_register)):
        assert not np.isfinite(grads).any()
        np.testing.assert_array_equal(register, [0] * 8)
    np.testing.assert_array_equal(tf_w, [1.0, 1.0])
    np.testing.assert_array_equal(npu_w, [1.0, 1.0])
    assert tf_step == 0 and npu_step == 0


@pytest.mark.parametrize("mode", [0, 1], ids=["saturation", "inf_nan"])
def test_the_finite_step_is_applied_identically_by_both(mode):
    """Control: at a scale that does not overflow both apply the true gradient, 4 per weight."""
    nls.set_device_sat_mode(mode)
    results = [_one_step(make, scale=1024.0) for make in (_tf_optimizer, _npu_optimizer)]
    for grads, register, w, step in results:
        np.testing.assert_array_equal(grads, [4.0, 4.0])
        np.testing.assert_array_equal(register, [0] * 8)
        np.testing.assert_array_equal(w, [1.0 - 4.0 * LR] * 2)
        assert step == 1
