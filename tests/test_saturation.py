"""Saturation in real models: every fp16 op of a graph, the function wrapper, the Keras layer."""
import collections

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import saturation
from tf_versions import tf2_only

F16_MAX = 65504.0
ZEROS = [0] * 8
OVERFLOW_ONLY = [1, 0, 0, 0, 0, 0, 0, 0]


def _f16(values):
    return tf.cast(tf.constant(values, tf.float32), tf.float16)


def _status(session):
    return session.run(emulation.npu_get_float_status_v2())


# -- every op ------------------------------------------------------------------------------------
def test_every_fp16_op_saturates_inside_the_context(graph, session):
    with saturation.saturate_every_op() as callback:
        x = _f16([300.0, 2.0])
        square = x * x                               # 90000 -> 65504
        difference = square - _f16([-1e4, 0.0])      # 65504 + 10000 -> 65504 again
    after = x * x                                    # outside: IEEE arithmetic
    np.testing.assert_array_equal(session.run(square), [F16_MAX, 4.0])
    np.testing.assert_array_equal(session.run(difference), [F16_MAX, 4.0])
    np.testing.assert_array_equal(_status(session), OVERFLOW_ONLY)
    assert np.isposinf(session.run(after)[0])
    assert callback.saturated >= 3  # the cast, the product, the difference


def test_every_op_leaves_other_dtypes_and_data_moves_alone(graph, session):
    with saturation.saturate_every_op() as callback:
        big32 = tf.constant([1e38], tf.float32) * 10.0     # float32: not in dtypes
        before = callback.saturated
        moved = tf.reshape(tf.transpose(tf.constant([[np.inf]], tf.float16)), [1])
        assert callback.saturated == before               # reshape/transpose cannot overflow
    assert np.isposinf(session.run(big32)[0])
    assert np.isposinf(session.run(moved)[0])
    np.testing.assert_array_equal(_status(session), ZEROS)


def test_every_op_can_cover_float32_too(graph, session):
    with saturation.saturate_every_op(dtypes=("float16", "float32")):
        big32 = tf.constant([1e38], tf.float32) * 10.0
    np.testing.assert_array_equal(session.run(big32), np.array([np.finfo(np.float32).max]))
    np.testing.assert_array_equal(_status(session), OVERFLOW_ONLY)


@pytest.mark.parametrize("dtypes", [("int32",), (), ("float16", "bool")])
def test_every_op_rejects_non_floating_dtypes(dtypes):
    with pytest.raises(ValueError, match="floating dtype"):
        with saturation.saturate_every_op(dtypes):
            pass


def test_gradients_built_inside_are_saturated_and_recorded(graph, session):
    with saturation.saturate_every_op():
        x = _f16([300.0, 3.0])
        y = x * x
        grad = tf.gradients(y, x, grad_ys=_f16([1000.0, 1.0]))[0]  # 1000 * 600 overflows
    np.testing.assert_array_equal(session.run(grad), [F16_MAX, 6.0])
    np.testing.assert_array_equal(_status(session), OVERFLOW_ONLY)


@tf2_only
def test_every_op_in_tf_function_with_gradient_tape(npu_device):
    @tf.function
    def forward_backward(x, dy):
        with saturation.saturate_every_op():
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = x * x
            return y, tape.gradient(y, x, output_gradients=dy)

    y, grad = forward_backward(_f16([3.0, 1.0]), _f16([1.0, 1.0]))
    np.testing.assert_array_equal(y.numpy(), [9.0, 1.0])
    np.testing.assert_array_equal(grad.numpy(), [6.0, 2.0])  # gradients stay exact
    np.testing.assert_array_equal(emulation.npu_get_float_status_v2().numpy(), ZEROS)
    y, grad = forward_backward(_f16([300.0, 1.0]), _f16([1000.0, 1.0]))
    np.testing.assert_array_equal(y.numpy(), [F16_MAX, 1.0])
    np.testing.assert_array_equal(grad.numpy(), [F16_MAX, 2.0])
    np.testing.assert_array_equal(npu_device.status(), OVERFLOW_ONLY)


@pytest.mark.npu_device(sat_mode="inf_nan")
def test_every_op_changes_nothing_in_inf_nan_mode(npu_device, graph, session):
    assert nls.get_device_sat_mode() == emulation.INF_NAN
    with saturation.saturate_every_op() as callback:
        y = _f16([300.0]) * _f16([300.0])
    assert callback.saturated == 0
    assert np.isposinf(session.run(y)[0])
    np.testing.assert_array_equal(_status(session), ZEROS)


def test_every_op_context_is_removed_on_error(graph):
    with pytest.raises(RuntimeError):
        with saturation.saturate_every_op():
            raise RuntimeError("boom")
    assert not saturation.every_op_active()
    y = _f16([300.0]) * _f16([300.0])
    assert not [op for op in graph.get_operations() if "saturate" in op.name and
                y.op in [t.op for t in op.inputs]]


# -- function wrapper ----------------------------------------------------------------------------
def test_saturating_saturates_outputs_and_their_gradient(graph, session):
    @saturation.saturating
    def layer(x):
        return {"out": x * 1000.0, "count": tf.constant(3)}

    x = _f16([100.0, 1.0])
    result = layer(x)
    assert result["count"].dtype == tf.int32
    grad = tf.gradients(result["out"], x, grad_ys=_f16([float("nan"), 1.0]))[0]
    np.testing.assert_array_equal(session.run(result["out"]), [F16_MAX, 1000.0])
    np.testing.assert_array_equal(_status(session), OVERFLOW_ONLY)
    # NaN flowing back into the output becomes 0 there; ops inside fn are not saturated
    np.testing.assert_array_equal(session.run(grad), [0.0, 1000.0])
    np.testing.assert_array_equal(_status(session), [1, 1, 0, 0, 0, 0, 0, 0])


def test_saturating_every_op_saturates_intermediate_results(graph, session):
    @saturation.saturating(every_op=True, outputs=False)
    def model(x):
        return (x * x) / _f16([4.0])  # 90000 / 4 would be 22500 without the device's saturation

    np.testing.assert_array_equal(session.run(model(_f16([300.0]))), [F16_MAX / 4.0])
    np.testing.assert_array_equal(_status(session), OVERFLOW_ONLY)


def test_saturating_leaves_named_tuples_alone_and_can_saturate_inputs(graph, session):
    Spec = collections.namedtuple("Spec", ["loss"])

    @saturation.saturating(inputs=True)
    def model_fn(x):
        return Spec(loss=x), x

    spec, passed = model_fn(_f16([1e5]))
    assert isinstance(spec, Spec)
    np.testing.assert_array_equal(session.run(passed), [F16_MAX])
    np.testing.assert_array_equal(session.run(spec.loss), [F16_MAX])  # the saturated input


def test_saturating_refuses_non_callables():
    with pytest.raises(TypeError, match="callable"):
        saturation.saturating(3)


@tf2_only
# -- Keras layer -----------------------------------------------------------------------------------
def test_keras_layer_saturates_forward_values(npu_device):
    inputs = tf.keras.Input((2,), dtype="float16")
    model = tf.keras.Model(inputs, saturation.Saturate()(inputs * 1000.0))
    out = model(np.array([[100.0, 1.0]], np.float16))
    assert out.dtype == tf.float16
    np.testing.assert_array_equal(np.asarray(out), [[F16_MAX, 1000.0]])
    np.testing.assert_array_equal(npu_device.status(), OVERFLOW_ONLY)


@tf2_only
def test_keras_layer_keeps_dtype_under_mixed_precision_and_saturates_gradients(npu_device):
    previous = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        layer = saturation.Saturate()
        x32 = tf.constant([[1e5]], tf.float32)
        assert layer(x32).dtype == tf.float32  # no autocast to float16
        x = tf.constant([[2.0]], tf.float16)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
        grad = tape.gradient(y, x, output_gradients=tf.constant([[np.inf]], tf.float16))
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)
    np.testing.assert_array_equal(grad.numpy(), [[F16_MAX]])
    np.testing.assert_array_equal(npu_device.status(), OVERFLOW_ONLY)


@tf2_only
def test_keras_layer_round_trips_its_config_and_is_identity_in_inf_nan_mode():
    layer = saturation.Saturate(name="sat")
    clone = saturation.Saturate.from_config(layer.get_config())
    assert clone.name == "sat" and not clone.trainable
    nls.set_device_sat_mode(emulation.INF_NAN)
    out = clone(tf.constant([np.inf], tf.float16))
    assert np.isposinf(np.asarray(out)[0])
