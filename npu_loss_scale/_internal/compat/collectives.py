"""TensorFlow's collective ops (``tensorflow.python.ops.collective_ops``) across releases.

- TensorFlow 2.x has ``all_reduce_v2`` (CollectiveReduceV2, with a timeout). It takes a ``name``
  from TF 2.8 on; before (TF 2.6.5) the op is built inside a name scope of that name instead, so
  it is called ``<name>/CollectiveReduceV2``: its errors (a timed-out or aborted all-reduce) still
  name it.
- TensorFlow 1.15 has only the first versions, ``all_reduce`` (CollectiveReduce) and
  ``all_gather`` (CollectiveGather), which take no timeout (``HAS_TIMEOUT`` says which) and keep
  waiting for a peer that died even when their step is cancelled (``operation_timeout_in_ms``,
  measured). There a ``timeout`` is kept by a watchdog (:mod:`.._internal.deadlines`): when the
  op has waited that long, the process logs an error and exits with status
  ``deadlines.EXIT_STATUS`` (124), the only way out of the wait. Its CollectiveReduce merges with
  ``Add`` or ``Mul`` only: a maximum or minimum is a gather, then a reduction over the ranks.
"""
import inspect

import tensorflow as tf
from tensorflow.python.ops import collective_ops

from npu_loss_scale._internal import deadlines

HAS_TIMEOUT = hasattr(collective_ops, "all_reduce_v2")

# Ends the process when a collective op of TensorFlow 1.15 outlives its timeout.
_WATCHDOG = deadlines.Watchdog(deadlines.exit_process)


def all_reduce_v2(tensor, name=None, **kwargs):
    """``collective_ops.all_reduce_v2(tensor, **kwargs)``, its op named after ``name``."""
    reduce = collective_ops.all_reduce_v2
    if name is None:
        return reduce(tensor, **kwargs)
    if "name" in inspect.signature(reduce).parameters:
        return reduce(tensor, name=name, **kwargs)
    with tf.name_scope(name):
        return reduce(tensor, **kwargs)


def all_reduce(tensor, merge_op, group_size, group_key, instance_key, timeout=0.0,
               communication_hint="auto", name=None):
    """``tensor`` reduced with ``merge_op`` (``"Add"``, ``"Mul"``, ``"Max"``, ``"Min"``) over
    the group's processes, waiting at most ``timeout`` seconds (0: no limit) for them:
    CollectiveReduceV2 where it exists, else CollectiveReduce under the watchdog; a tensor named
    ``name`` when given."""
    if HAS_TIMEOUT:
        return all_reduce_v2(
            tensor, group_size=group_size, group_key=group_key, instance_key=instance_key,
            merge_op=merge_op, final_op="Id", communication_hint=communication_hint,
            timeout=timeout, name=name)

    def reduce_v1(value):
        if merge_op in ("Max", "Min"):
            # 1.15's CollectiveReduce merges with Add or Mul only: gather every rank's tensor
            # along a new axis 0, then take the maximum or minimum over it (the same values)
            gathered = _all_gather_v1(tf.expand_dims(value, 0), group_size, group_key,
                                      instance_key)
            return (tf.reduce_max if merge_op == "Max" else tf.reduce_min)(gathered, axis=0)
        # 1.15 wants its input placed on a device (merged into any device scope around it).
        with tf.device(value.device or "/device:CPU:0"):
            placed = tf.identity(value)
            return collective_ops.all_reduce(placed, group_size, group_key, instance_key,
                                             merge_op, "Id",
                                             communication_hint=communication_hint)

    out = _within(timeout, reduce_v1, tensor, "CollectiveReduce", name)
    return out if name is None else tf.identity(out, name=name)


def all_reduce_sum(tensor, group_size, group_key, instance_key, communication_hint, timeout,
                   name):
    """The sum of ``tensor`` over the group's processes, a tensor named ``name``."""
    return all_reduce(tensor, "Add", group_size, group_key, instance_key, timeout=timeout,
                      communication_hint=communication_hint, name=name)


def all_gather(tensor, group_size, group_key, instance_key, timeout=0.0):
    """The group's tensors concatenated along axis 0, in rank order, waiting at most
    ``timeout`` seconds (0: no limit): CollectiveGatherV2 where it exists, else CollectiveGather
    under the watchdog."""
    if HAS_TIMEOUT:
        return collective_ops.all_gather_v2(tensor, group_size=group_size, group_key=group_key,
                                            instance_key=instance_key, timeout=timeout)
    return _within(timeout, lambda value: _all_gather_v1(value, group_size, group_key,
                                                         instance_key),
                   tensor, "CollectiveGather", None)


def _all_gather_v1(tensor, group_size, group_key, instance_key):
    with tf.device(tensor.device or "/device:CPU:0"):
        placed = tf.identity(tensor)
        return collective_ops.all_gather(placed, group_size, group_key, instance_key)


def _within(timeout, build, tensor, op_type, name):
    """``build(tensor)`` (TF 1.15 collectives), bracketed by the watchdog when ``timeout`` > 0."""
    if not timeout:
        return build(tensor)
    label = "TensorFlow %s's %s%s" % (tf.__version__, op_type,
                                     "" if name is None else " %r" % name)
    _, done = deadlines.bracket(_WATCHDOG, tensor, timeout, build,
                                name="%s_deadline" % (name or op_type), label=label)
    return done
