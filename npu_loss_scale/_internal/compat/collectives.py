"""TensorFlow's collective ops (``tensorflow.python.ops.collective_ops``) across releases.

- TensorFlow 2.x has ``all_reduce_v2`` (CollectiveReduceV2, with a timeout). It takes a ``name``
  from TF 2.8 on; before (TF 2.6.5) the op is built inside a name scope of that name instead, so
  it is called ``<name>/CollectiveReduceV2``: its errors (a timed-out or aborted all-reduce) still
  name it.
- TensorFlow 1.15 has only the first version, ``all_reduce`` (CollectiveReduce), which has no
  timeout: there a rank whose peer has died waits for it. ``HAS_TIMEOUT`` says which.
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


def all_reduce_sum(tensor, group_size, group_key, instance_key, communication_hint, timeout,
                   name):
    """The sum of ``tensor`` over the group's processes, a tensor named ``name``."""
    if HAS_TIMEOUT:
        return all_reduce_v2(
            tensor, group_size=group_size, group_key=group_key, instance_key=instance_key,
            merge_op="Add", final_op="Id", communication_hint=communication_hint,
            timeout=timeout, name=name)
    # 1.15 wants its input placed on a device (merged into any device scope around it).
    with tf.device(tensor.device or "/device:CPU:0"):
        placed = tf.identity(tensor)
        out = collective_ops.all_reduce(placed, group_size, group_key, instance_key, "Add",
                                        "Id", communication_hint=communication_hint)
    return tf.identity(out, name=name)
