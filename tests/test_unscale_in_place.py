"""The unscaling multiply is the last reader of each scaled gradient, so TensorFlow writes the
unscaled values into the scaled gradient's own buffer: no new buffer per gradient and step.
Both with the fused unscale-and-check kernel (one op per gradient) and without it (the two
multiplies by the factors of 1/S wait for the check's sum, and each writes in place).

Checked from the allocation records of a traced step: the multiply's output has the address of
its input. Before the unscaling waited for the check's read, the emulation backend never got
that (its check and the multiply read the gradient at the same time)."""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls

SHAPES = [(256, 128), (128,), (128, 64), (4096,)]


def _addresses(meta):
    out = {}
    for dev in meta.step_stats.dev_stats:
        for node in dev.node_stats:
            for output in node.output:
                desc = output.tensor_description.allocation_description
                out[(node.node_name, output.slot)] = desc.ptr
    return out


def _address(where, tensor):
    """The buffer address of ``tensor`` in a step's records. Grappler's arithmetic optimizer may
    have replaced an ``AddN`` of one gradient with itself (``w * w``'s two halves) by a multiply
    named ``<scope>/ArithmeticOptimizer/SimplifyAggregation_Mul_<name>`` (TensorFlow 1.15 does)."""
    name = tensor.op.name
    scope, _, last = name.rpartition("/")
    rewritten = "%s/ArithmeticOptimizer/SimplifyAggregation_Mul_%s" % (scope, last)
    for candidate in (name, rewritten):
        if (candidate, tensor.value_index) in where:
            return where[(candidate, tensor.value_index)]
    raise AssertionError("no allocation recorded for %s" % name)


def _source(tensor):
    """The tensor an unscaling multiply reads, past identities (they share the buffer)."""
    while tensor.op.type == "Identity":
        tensor = tensor.op.inputs[0]
    return tensor


@pytest.mark.parametrize("fused", ["on", "off"])
@pytest.mark.parametrize("backend", ["emulation", "inf_nan"])
def test_each_unscaling_multiply_writes_into_the_scaled_gradient(backend, fused, monkeypatch):
    monkeypatch.setenv("NPU_LOSS_SCALE_FUSED_UNSCALE", fused)
    with tf.Graph().as_default():
        ws = [tf.compat.v1.get_variable("w%d" % i, s, initializer=tf.ones_initializer())
              for i, s in enumerate(SHAPES)]
        x = tf.compat.v1.placeholder(tf.float32, [])
        loss = x * tf.add_n([tf.reduce_sum(w * w) for w in ws])
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                        nls.FixedLossScaleManager(2 ** 8), backend=backend)
        grads_and_vars = opt.compute_gradients(loss, ws)
        train = opt.apply_gradients(grads_and_vars)
        muls = []
        for g, _ in grads_and_vars:
            assert g.op.type == ("NlsUnscaleAndCheck" if fused == "on" else "Mul"), g.op.type
            if fused == "on":
                scaled = g.op.inputs[0]                  # (scaled, factors)
            else:                                        # MulNoNan(scaled, first) * second
                assert g.op.inputs[0].op.type == "MulNoNan", g.op.inputs[0].op.type
                scaled = g.op.inputs[0].op.inputs[0]
            assert scaled.shape == g.shape
            muls.append((g, _source(scaled)))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                meta = tf.compat.v1.RunMetadata()
                sess.run(train, {x: 1.0}, options=tf.compat.v1.RunOptions(
                    trace_level=tf.compat.v1.RunOptions.FULL_TRACE), run_metadata=meta)
                where = _addresses(meta)
                for unscaled, scaled in muls:
                    out = _address(where, unscaled)
                    assert out and out == _address(where, scaled), \
                        (unscaled.op.name, scaled.op.name)
            # and the values are right: w -= 0.1 * 2w per step, three steps
            for w in sess.run(ws):
                np.testing.assert_allclose(w, np.full(w.shape, 0.8 ** 3, np.float32), rtol=1e-6)
