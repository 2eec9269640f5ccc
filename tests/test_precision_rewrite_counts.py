"""The emulated precision_mode pays its rewrite (TF1 sessions) or its rounding (TF2 tracing) once:
no training step after the first rewrites or traces again, counted by
``precision.rewrite_counters`` (counts, not times). A value read by several cube ops is rounded
once per rewrite, and a rewrite never reuses a rounding made for another mode.

Expected values by hand: [300, 1.0001] . [300, 3] = 90003.0003 in float32; in float16 the
operands are [300, 1] (1.0001 is 1 there: the spacing is 2**-10) and the sum 90003 is beyond
65504, so the lowered matmul gives 65504 and sets the register; [300, 1.0001] . [1, 1] is 301
(exact in float16). 1.01 . 1: 1.01 * 1024 = 1034.24, so float16 (10 fraction bits) rounds it to
1034/1024 = 1.009765625; 1.01 * 128 = 129.28, so bfloat16 (7 fraction bits) rounds it to
129/128 = 1.0078125; both products are then exact in their dtype.
"""
import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale.device import precision
from npu_loss_scale.device import register as emulation
from tf_versions import tf2_only

X = [[300.0, 1.0001]]
W_BIG = [[300.0], [3.0]]
W_ONES = [[1.0], [1.0]]


def config(mode):
    from npu_bridge.npu_init import npu_config_proto  # pylint: disable=import-outside-toplevel
    cfg = npu_config_proto()
    cfg.graph_options.rewrite_options.custom_optimizers[0].parameter_map[
        "precision_mode"].s = mode.encode()
    return cfg


@pytest.fixture
def hook(npu_shim):  # pylint: disable=unused-argument
    """The emulation's session hook, removed afterwards (with the shim, by npu_shim)."""
    precision.install_session_hook()
    yield


def is_rounding(op, dtype):
    """Whether ``op`` rounds a value to ``dtype``: a ``Cast`` to it, or (float16) the fused
    roundings of the package's kernels, which cast (and saturate) and cast back in one op."""
    if op.type == "Cast":
        return op.outputs[0].dtype == dtype
    return op.type in ("NlsRoundHalfSaturate", "NlsRoundHalf") and dtype == tf.float16


def rounding_casts(graph, tensor, dtype):
    """The roundings of ``tensor`` to ``dtype`` in ``graph``."""
    return [op for op in graph.get_operations() if is_rounding(op, dtype) and op.inputs[0] is tensor]


def test_no_step_after_the_first_rewrites_again_until_the_graph_grows(hook, graph):
    x = tf.compat.v1.get_variable("x", initializer=tf.constant(X))
    w = tf.compat.v1.get_variable("w", initializer=tf.constant(W_ONES))
    loss = tf.reduce_sum(tf.matmul(x, w))
    train = tf.compat.v1.train.GradientDescentOptimizer(1e-6).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
    counters = precision.rewrite_counters
    with tf.compat.v1.Session(config=config("allow_mix_precision")) as sess:
        sess.run(init)
        sess.run(train)
        first = counters.snapshot()
        for _ in range(4):
            sess.run(train)
        assert counters.snapshot() == first
        # the graph grows: the next run rewrites the new matmul, and only it
        extra = tf.matmul(x, w) * 1.0
        sess.run(extra)
        after = counters.snapshot()
        assert after["rewrites"] - first["rewrites"] == 1
        assert after["rewritten_ops"] - first["rewritten_ops"] == 1
        sess.run(extra)
        assert counters.snapshot() == after


def test_a_value_read_by_two_cube_ops_is_rounded_once_and_both_products_are_right(hook, graph):
    x = tf.constant(X)
    big = tf.matmul(x, tf.constant(W_BIG)) * 1.0
    small = tf.matmul(x, tf.constant(W_ONES)) * 1.0
    status = emulation.npu_get_float_status_v2()
    with tf.compat.v1.Session(config=config("allow_mix_precision")) as sess:
        got_big, got_small = sess.run([big, small])
        assert sess.run(status)[0] == 1
    assert len(rounding_casts(graph, x, tf.float16)) == 1
    np.testing.assert_array_equal(got_big, [[65504.0]])
    np.testing.assert_array_equal(got_small, [[301.0]])


def test_a_later_rewrite_in_another_mode_makes_its_own_rounding(hook, graph):
    """A rounding cached across rewrites without the mode in its key would hand the bfloat16
    matmul the float16 operand (1.009765625 instead of bfloat16's 1.0078125)."""
    x = tf.constant([[1.01]])
    first = tf.matmul(x, tf.constant([[1.0]])) * 1.0
    with tf.compat.v1.Session(config=config("allow_mix_precision")) as sess:
        assert sess.run(first)[0][0] == 1.009765625
    second = tf.matmul(x, tf.constant([[1.0]])) * 1.0
    with tf.compat.v1.Session(config=config("allow_mix_precision_bf16")) as sess:
        got_first, got_second = sess.run([first, second])
    assert len(rounding_casts(graph, x, tf.float16)) == 1
    assert len(rounding_casts(graph, x, tf.bfloat16)) == 1
    assert got_first[0][0] == 1.009765625
    assert got_second[0][0] == 1.0078125


@tf2_only
def test_a_tf_function_rounds_its_ops_when_traced_and_not_at_later_calls():
    counters = precision.rewrite_counters
    x = tf.constant(X)
    w = tf.Variable(W_ONES)

    @tf.function
    def step():
        return tf.matmul(x, w)

    with precision.op_precision("allow_mix_precision"):
        before = counters.snapshot()
        assert step().numpy()[0][0] == 301.0
        traced = counters.snapshot()
        for _ in range(3):
            step()
        assert counters.snapshot() == traced
    assert traced["traced_ops"] - before["traced_ops"] == 1
    assert traced["eager_ops"] == before["eager_ops"]


def float16_roundings(graph):
    return sum(1 for op in graph.get_operations() if is_rounding(op, tf.float16))


def chained_matmuls():
    """x . w1 = [300 + 1] = 301 (1.0001 is 1 in float16), then 301 . 300 = 90300: 65504."""
    first = tf.matmul(tf.constant(X), tf.constant(W_ONES))
    return tf.matmul(first, tf.constant([[300.0]]))


def test_a_cube_op_reading_a_rounded_result_does_not_round_it_again_tf1(hook, graph):
    out = chained_matmuls() * 1.0
    status = emulation.npu_get_float_status_v2()
    with tf.compat.v1.Session(config=config("allow_mix_precision")) as sess:
        assert sess.run(out)[0][0] == 65504.0
        assert sess.run(status)[0] == 1
    # x, w1, the first result (read as is by the second matmul), 300, the second result
    assert float16_roundings(graph) == 5


@tf2_only
def test_a_cube_op_reading_a_rounded_result_does_not_round_it_again_tf2():
    emulation.npu_clear_float_status_v2()
    with precision.op_precision("allow_mix_precision"):
        step = tf.function(chained_matmuls).get_concrete_function()
        assert step().numpy()[0][0] == 65504.0
    assert emulation.npu_get_float_status_v2().numpy()[0] == 1
    emulation.npu_clear_float_status_v2()
    assert float16_roundings(step.graph) == 5


@tf2_only
def test_a_traced_gradient_op_does_not_round_a_gradient_already_rounded():
    """TF2 code rounds as traced, before its gradient: the gradient flowing back through a
    cube op's rounded result is rounded (and saturated) on its way, so the cube ops of the
    backward pass that read it take it as it is, as they take their forward op's rounded
    operands; no rounding reads another rounding's value."""
    x = tf.constant([[300.0, 1.0001], [2.0, 3.0]])
    w = tf.Variable([[1.0, 2.0], [1.0, 0.5]])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            y = tf.matmul(tf.matmul(x, w), w)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, w)

    with precision.op_precision("allow_mix_precision"):
        grad = step()
    graph = step.get_concrete_function().graph
    roundings = [op for op in graph.get_operations() if is_rounding(op, tf.float16)]
    assert roundings

    def rounded_value(tensor):
        while tensor.op.type == "Identity":
            tensor = tensor.op.inputs[0]
        return is_rounding(tensor.op, tf.float16)

    twice = [op.name for op in roundings if rounded_value(op.inputs[0])]
    assert not twice
    assert np.isfinite(grad.numpy()).all()
