"""Gradient accumulation for :class:`NPULossScaleOptimizer` (``accumulation_steps=N``).

Each run of the train op adds the micro-batch's unscaled gradients to float32 accumulators (float64
for float64 variables). Every N-th run decides once, from the register (sticky over the N
micro-batches) and an inf/NaN test of the accumulators, through the optimizer's one skip decision
(``NPULossScaleOptimizer._skip_or_apply``) on the mean of the N micro-batch gradients; then the
accumulators and the micro-step restart. The other runs decide nothing: the step reads finite.
"""
import tensorflow as tf

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal.compat.variables import Variable, key as variable_key

__all__ = ["accumulating_apply"]


def _accumulator(state, var):
    """The accumulator of ``var``, created once per graph in the outermost graph."""
    key = variable_key(var)
    acc = state["accumulators"].get(key)
    if acc is None:
        dtype = tf.float64 if var.dtype.base_dtype == tf.float64 else tf.float32
        graph = _graphs.outermost_graph()
        with _graphs.outer_scope(graph):
            if graph is None:
                acc = Variable(tf.zeros(var.shape, dtype), trainable=False, name="accumulator")
            else:
                with graph.name_scope(None):
                    acc = Variable(tf.zeros(var.shape, dtype), trainable=False,
                                   name=var.op.name + "/accumulator")
        state["accumulators"][key] = acc
    return acc


def _add(acc, grad):
    if isinstance(grad, tf.IndexedSlices):
        return acc.scatter_add(tf.IndexedSlices(
            tf.cast(grad.values, acc.dtype), grad.indices, grad.dense_shape))
    return acc.assign_add(tf.cast(grad, acc.dtype))


@tf.autograph.experimental.do_not_convert   # builds the ops itself (tf.cond): nothing to convert
def accumulating_apply(optimizer, step, distribution, grads_and_vars, global_step, name, state):
    """(finite, step report) of one micro-batch's run: a deciding run's own, or on a waiting run
    finite True, the current loss scale and skipped count (no ``next_loss_scale``, no
    ``global_step``: the report is built before the run knows which it is).

    ``step`` is the optimizer's :class:`~npu_loss_scale.detection.step.StepCheck` of this train
    op: each micro-batch's gradients were observed when ``compute_gradients`` built them (the
    register stays sticky over the N runs); the deciding run reads and agrees once, through it.
    """
    # pylint: disable=protected-access
    n = optimizer._accumulation_steps
    pairs = [(g, v) for g, v in grads_and_vars if g is not None]
    accs = [_accumulator(state, v) for _, v in pairs]
    adds = [_add(acc, g) for (g, _), acc in zip(pairs, accs)]
    micro = state["micro_step"]
    with tf.control_dependencies(adds):
        micro_now = tf.identity(micro.assign_add(1))

    def decide():
        totals = [tf.identity(acc.read_value()) for acc in accs]
        if optimizer._check_overflow:
            status, end_ops = optimizer._read_and_agree(
                step, distribution, [(t, v) for t, (_, v) in zip(totals, pairs)], False)
            finite = tf.reduce_all(tf.equal(status, 0.0))
        else:
            finite, end_ops = tf.constant(True), []
        means = [(tf.cast(t / n, v.dtype.base_dtype), v) for t, (_, v) in zip(totals, pairs)]
        maybe_apply, ops, report = optimizer._skip_or_apply(
            distribution, finite, means, global_step, name, state)
        with tf.control_dependencies([maybe_apply] + totals):
            restart = [acc.assign(tf.zeros_like(acc)) for acc in accs]
            restart.append(micro.assign(0))
        with tf.control_dependencies([maybe_apply] + ops + end_ops + restart):
            return (tf.identity(finite), tf.identity(report["loss_scale"]),
                    tf.identity(report["skipped_steps"]))

    def wait():
        return (tf.constant(True), tf.identity(optimizer._manager.get_loss_scale()),
                state["skipped_steps"].read())

    finite, scale, skipped_now = tf.cond(micro_now >= n, decide, wait)
    return finite, {"loss_scale": scale, "next_loss_scale": None, "finite": finite,
                    "skipped_steps": skipped_now, "global_step": None}
