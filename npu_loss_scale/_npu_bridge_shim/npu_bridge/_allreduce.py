"""The gradient all-reduce of ``npu_bridge.estimator.npu.npu_optimizer`` (``allreduce``), kept
below both of its users: that module's optimizers and the Keras distribution of
:mod:`npu_bridge._keras_ranks` (a TF1 graph's gradient mean), which ``npu_optimizer`` in turn
calls for Keras optimizers."""
import tensorflow as tf

from npu_bridge import _ranks
from npu_bridge.hccl import hccl_ops


def allreduce(tensor, average=True):
    """Sum (``average=False``) or mean over the ranks of a tensor or IndexedSlices."""
    size = _ranks.rank_size()
    if isinstance(tensor, tf.IndexedSlices):
        values = hccl_ops.allgather(tensor.values, size)
        if average and size > 1:
            values = values / tf.cast(size, values.dtype)
        return tf.IndexedSlices(values, hccl_ops.allgather(tensor.indices, size),
                                dense_shape=tensor.dense_shape)
    summed = hccl_ops.allreduce(tensor, "sum")
    if average and size > 1:
        summed = summed / tf.cast(size, summed.dtype)
    return summed
