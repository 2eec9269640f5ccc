"""TensorFlow's collective ops (``tensorflow.python.ops.collective_ops``) across releases.

- TensorFlow 2.x has ``all_reduce_v2`` (CollectiveReduceV2, with a timeout). It takes a ``name``
  from TF 2.8 on; before (TF 2.6.5) the op is built inside a name scope of that name instead, so
  it is called ``<name>/CollectiveReduceV2``: its errors (a timed-out or aborted all-reduce) still
  name it.
- TensorFlow 1.15 has only the first versions, ``all_reduce`` (CollectiveReduce) and
  ``all_gather`` (CollectiveGather), which have no timeout (there a rank whose peer has died
  waits for it; ``HAS_TIMEOUT`` says which), and its CollectiveReduce merges with ``Add`` or
  ``Mul`` only: a maximum or minimum is a gather, then a reduction over the ranks.
"""
import inspect

import tensorflow as tf
from tensorflow.python.ops import collective_ops

HAS_TIMEOUT = hasattr(collective_ops, "all_reduce_v2")


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
    the group's processes: CollectiveReduceV2 where it exists, else CollectiveReduce (no
    timeout); a tensor named ``name`` when given."""
    if HAS_TIMEOUT:
        return all_reduce_v2(
            tensor, group_size=group_size, group_key=group_key, instance_key=instance_key,
            merge_op=merge_op, final_op="Id", communication_hint=communication_hint,
            timeout=timeout, name=name)
    if merge_op in ("Max", "Min"):
        # 1.15's CollectiveReduce merges with Add or Mul only: gather every rank's tensor along a
        # new axis 0, then take the maximum or minimum over it (the same values)
        gathered = all_gather(tf.expand_dims(tensor, 0), group_size, group_key, instance_key)
        out = (tf.reduce_max if merge_op == "Max" else tf.reduce_min)(gathered, axis=0)
        return out if name is None else tf.identity(out, name=name)
    # 1.15 wants its input placed on a device (merged into any device scope around it).
    with tf.device(tensor.device or "/device:CPU:0"):
        placed = tf.identity(tensor)
        out = collective_ops.all_reduce(placed, group_size, group_key, instance_key, merge_op,
                                        "Id", communication_hint=communication_hint)
    return out if name is None else tf.identity(out, name=name)


def all_reduce_sum(tensor, group_size, group_key, instance_key, communication_hint, timeout,
                   name):
    """The sum of ``tensor`` over the group's processes, a tensor named ``name``."""
    return all_reduce(tensor, "Add", group_size, group_key, instance_key, timeout=timeout,
                      communication_hint=communication_hint, name=name)


def all_gather(tensor, group_size, group_key, instance_key, timeout=0.0):
    """The group's tensors concatenated along axis 0, in rank order: CollectiveGatherV2 where
    it exists, else CollectiveGather (no timeout)."""
    if HAS_TIMEOUT:
        return collective_ops.all_gather_v2(tensor, group_size=group_size, group_key=group_key,
                                            instance_key=instance_key, timeout=timeout)
    with tf.device(tensor.device or "/device:CPU:0"):
        placed = tf.identity(tensor)
        return collective_ops.all_gather(placed, group_size, group_key, instance_key)
