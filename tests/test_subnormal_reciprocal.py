"""Loss scales whose float32 reciprocal is subnormal (above 2**126): every front end applies the
true unscaled gradient, not zero.

CPU kernels flush subnormals to zero, so multiplying by ``1/S`` at ``S = 2**127`` used to apply
zero gradients forever. Expected values are NumPy float64 arithmetic: the update of
``grad * S / S`` (exact for a power-of-two scale), which must be non-zero.
"""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale._internal import kernels as _kernels
from npu_loss_scale.scaling.reference import ascend as reference
from tf_versions import tf2_only

W0 = np.array([1.0, -2.0, 0.75], np.float32)
C = np.array([0.5, -0.25, 0.875], np.float32)    # the gradient of sum(C * w); C * 2**127 is finite
LR = 0.5
EXPONENTS = [126, 127]


def _expected(scale, steps=1):
    """float64 NumPy: ``steps`` SGD steps with the gradient ``C * S / S``."""
    grad = C.astype(np.float64) * scale / scale
    assert np.all(grad != 0)
    return (W0.astype(np.float64) - steps * LR * grad).astype(np.float32)


@pytest.fixture(params=["on", "off"], ids=["fused", "two_pass"])
def fused(request, monkeypatch):
    monkeypatch.setenv(_kernels.ENV_MODE, request.param)
    _kernels._reset_for_tests()  # pylint: disable=protected-access
    yield request.param
    _kernels._reset_for_tests()  # pylint: disable=protected-access


def _graph_run(make_optimizer, steps=1):
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=W0)
        loss = tf.reduce_sum(tf.constant(C) * w)
        opt = make_optimizer()
        train = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(steps):
                sess.run(train)
            return sess.run(w), sess.run(opt.skipped_steps)


# -- NPULossScaleOptimizer -------------------------------------------------------------------
@pytest.mark.parametrize("exponent", EXPONENTS)
@pytest.mark.parametrize("backend", ["inf_nan", "emulation"])
def test_npu_optimizer_applies_the_true_gradient(exponent, backend, fused):
    scale = 2.0 ** exponent
    w, skipped = _graph_run(lambda: nls.NPULossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR), nls.FixedLossScaleManager(scale),
        backend=backend))
    assert skipped == 0
    np.testing.assert_array_equal(w, _expected(scale))


@pytest.mark.parametrize("exponent", EXPONENTS)
def test_npu_optimizer_without_overflow_check_applies_the_true_gradient(exponent):
    scale = 2.0 ** exponent
    w, _ = _graph_run(lambda: nls.NPULossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR),
        nls.FixedLossScaleManager(scale, enable_overflow_check=False)))
    np.testing.assert_array_equal(w, _expected(scale))


def test_a_dynamic_manager_growing_to_2_127_keeps_applying(fused):
    mgr = nls.ExponentialUpdateLossScaleManager(2.0 ** 125, incr_every_n_steps=1)
    w, skipped = _graph_run(lambda: nls.NPULossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR), mgr), steps=3)   # 2**125, 126, 127
    assert skipped == 0
    np.testing.assert_array_equal(w, _expected(2.0 ** 127, steps=3))


@tf2_only
@pytest.mark.parametrize("exponent", EXPONENTS)
def test_npu_optimizer_in_a_tf_function(exponent, fused):
    scale = 2.0 ** exponent
    w = tf.Variable(W0)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                    nls.FixedLossScaleManager(scale))

    @tf.function
    def step():
        opt.minimize(lambda: tf.reduce_sum(tf.constant(C) * w), var_list=[w])

    step()
    np.testing.assert_array_equal(w.numpy(), _expected(scale))


@pytest.mark.parametrize("exponent", EXPONENTS)
def test_bfloat16_gradients_are_unscaled_in_float32(exponent, fused):
    scale = 2.0 ** exponent
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant(W0, tf.bfloat16))
        loss = tf.cast(tf.reduce_sum(tf.constant(C, tf.bfloat16) * w), tf.float32)
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                        nls.FixedLossScaleManager(scale))
        (grad, _), = opt.compute_gradients(loss, [w])
        assert grad.dtype == tf.bfloat16
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            got = sess.run(tf.cast(grad, tf.float64))
    np.testing.assert_array_equal(got, C.astype(np.float64) * scale / scale)


# -- the Megatron mixed-precision optimizer --------------------------------------------------
@pytest.mark.parametrize("exponent", EXPONENTS)
def test_megatron_optimizer_applies_the_true_gradient(exponent, fused):
    scale = 2.0 ** exponent
    w, skipped = _graph_run(lambda: nls.MegatronMixedPrecisionOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR), nls.ConstantGradScaler(scale)))
    assert skipped == 0
    np.testing.assert_array_equal(w, _expected(scale))


def test_megatron_dynamic_scaler_growing_to_2_127_keeps_applying(fused):
    scaler = nls.DynamicGradScaler(2.0 ** 125, min_scale=1.0, growth_factor=2.0,
                                   backoff_factor=0.5, growth_interval=1, hysteresis=2)
    w, skipped = _graph_run(lambda: nls.MegatronMixedPrecisionOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR), scaler), steps=3)
    assert skipped == 0
    np.testing.assert_array_equal(w, _expected(2.0 ** 127, steps=3))


# -- GradScaler -----------------------------------------------------------------------------
@tf2_only
@pytest.mark.parametrize("exponent", EXPONENTS)
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("explicit_unscale", [False, True], ids=["step", "unscale_then_step"])
def test_grad_scaler_applies_the_true_gradient(exponent, traced, explicit_unscale):
    scale = 2.0 ** exponent
    w = tf.Variable(W0)
    opt = tf.keras.optimizers.SGD(LR)
    scaler = nls.GradScaler(init_scale=scale, growth_interval=10 ** 6)

    def body():
        with tf.GradientTape() as tape:
            loss = scaler.scale(tf.reduce_sum(tf.constant(C) * w))
        grads = tape.gradient(loss, [w])
        if explicit_unscale:
            grads = scaler.unscale_(opt, grads)
        scaler.step(opt, list(zip(grads, [w])))
        scaler.update()

    (tf.function(body) if traced else body)()
    np.testing.assert_array_equal(w.numpy(), _expected(scale))


# -- Keras ----------------------------------------------------------------------------------
@tf2_only
@pytest.mark.parametrize("exponent", EXPONENTS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_keras_optimizer_applies_the_true_gradient(exponent, dynamic):
    from npu_loss_scale.keras import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    scale = 2.0 ** exponent
    w = tf.Variable(W0)
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(LR), dynamic=dynamic,
                                initial_scale=scale,
                                **({"dynamic_growth_steps": 10 ** 6} if dynamic else {}))
    model_loss = lambda: tf.reduce_sum(tf.constant(C) * w)  # noqa: E731
    if hasattr(opt, "get_scaled_loss"):                     # Keras 2
        with tf.GradientTape() as tape:
            scaled = opt.get_scaled_loss(model_loss())
        grads = opt.get_unscaled_gradients(tape.gradient(scaled, [w]))
        opt.apply_gradients(zip(grads, [w]))
    else:                                                   # Keras 3: apply() unscales
        with tf.GradientTape() as tape:
            scaled = opt.scale_loss(model_loss())
        opt.apply(tape.gradient(scaled, [w]), [w])
    np.testing.assert_array_equal(w.numpy(), _expected(scale))


# -- the NumPy twin -------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [2.0 ** 126, 2.0 ** 127, 3.0 ** 80, 1.7e38, 3.0e38, 0.8 ** 5 * 2 ** 32])
def test_the_twin_and_the_package_unscale_bitwise_alike(scale, fused):
    """Non-power-of-two scales above 2**126 (3**80, 1.7e38) too: the twin follows the rule
    from its description, with no code shared."""
    rng = np.random.RandomState(7)
    scaled = (rng.uniform(-1, 1, 1000) * np.float32(scale)).astype(np.float32)
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=np.zeros(1000, np.float32))
        loss = tf.reduce_sum(tf.constant(scaled / np.float32(scale)) * w)
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                        nls.FixedLossScaleManager(scale), backend="inf_nan")
        (grad, _), = opt.compute_gradients(loss, [w])
        # the scaled gradient TensorFlow computed, fed through the package's unscaling
        scaled_grad = tf.gradients(opt._scale_loss(loss), [w])[0]  # pylint: disable=protected-access
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            got, raw = sess.run([grad, scaled_grad])
    want = reference.unscale(raw, scale)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.count_nonzero(got) == np.count_nonzero(raw)
