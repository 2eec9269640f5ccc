"""Shim of ``npu_bridge.hccl.hccl_ops`` for a single emulated rank."""
import tensorflow as tf

from npu_bridge import _ranks

_REDUCTIONS = ("sum", "prod", "max", "min")


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group="hccl_world_group"):  # pylint: disable=unused-argument
    """All-reduce over the ranks; over the single emulated rank, the tensor itself.

    Accepts a tensor or a list of tensors (as the adapter does); raises NotImplementedError with
    RANK_SIZE > 1.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError("reduction must be one of %s; got %r" % (", ".join(_REDUCTIONS),
                                                                  reduction))
    _ranks.require_single_rank("hccl_ops.allreduce")
    if isinstance(tensor, (list, tuple)):
        return [tf.identity(t) for t in tensor]
    return tf.identity(tensor)


def __getattr__(name):
    raise AttributeError("npu_bridge.hccl.hccl_ops.%s is not emulated on CPU by npu_loss_scale "
                         "(the shim provides allreduce for a single rank)" % name)
