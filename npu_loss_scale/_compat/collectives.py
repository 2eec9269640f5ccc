"""TensorFlow's collective all-reduce between processes (``agreement='collective'``).

TensorFlow 2.x: ``collective_ops.all_reduce_v2`` (CollectiveReduceV2, with a timeout).
TensorFlow 1.15 has only the first version, ``collective_ops.all_reduce`` (CollectiveReduce),
which has no timeout: there a rank whose peer has died waits for it. ``HAS_TIMEOUT`` says which.
"""
import tensorflow as tf
from tensorflow.python.ops import collective_ops

HAS_TIMEOUT = hasattr(collective_ops, "all_reduce_v2")


def all_reduce_sum(tensor, group_size, group_key, instance_key, communication_hint, timeout,
                   name):
    """The sum of ``tensor`` over the group's processes, a tensor named ``name``."""
    if HAS_TIMEOUT:
        return collective_ops.all_reduce_v2(
            tensor, group_size=group_size, group_key=group_key, instance_key=instance_key,
            merge_op="Add", final_op="Id", communication_hint=communication_hint,
            timeout=timeout, name=name)
    # 1.15 wants its input placed on a device (merged into any device scope around it).
    with tf.device(tensor.device or "/device:CPU:0"):
        placed = tf.identity(tensor)
        out = collective_ops.all_reduce(placed, group_size, group_key, instance_key, "Add",
                                        "Id", communication_hint=communication_hint)
    return tf.identity(out, name=name)
