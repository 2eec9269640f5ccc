"""Shim of ``npu_device.distribute`` at one rank (the device computes the identity there)."""
import tensorflow as tf

from npu_bridge import _ranks
from npu_bridge._shim import module_getattr as _module_getattr

_REDUCTIONS = ("mean", "sum", "max", "min", "prod")


def all_reduce(values, reduction="mean", fusion=1, fusion_id=-1, group="hccl_world_group"):  # pylint: disable=unused-argument
    """All-reduce over the ranks: at one rank, ``values`` themselves."""
    if reduction not in _REDUCTIONS:
        raise ValueError("reduction must be one of %s; got %r" % (", ".join(_REDUCTIONS),
                                                                  reduction))
    _ranks.require_single_rank("npu_device.distribute.all_reduce")
    if isinstance(values, (list, tuple)):
        return [tf.identity(v) for v in values]
    return tf.identity(values)


def broadcast(values, root_rank=0, fusion=2, fusion_id=0, group="hccl_world_group"):  # pylint: disable=unused-argument
    """Assigns rank ``root_rank``'s variables to every rank: nothing to do at one rank."""
    if root_rank != 0:
        raise ValueError("root_rank must be 0 with one rank; got %r" % (root_rank,))
    _ranks.require_single_rank("npu_device.distribute.broadcast")


def shard_and_rebatch_dataset(dataset, global_bs):
    """``(dataset, global_bs)``: with one rank the whole dataset and batch are this rank's."""
    _ranks.require_single_rank("npu_device.distribute.shard_and_rebatch_dataset")
    return dataset, global_bs


def npu_distributed_keras_optimizer_wrapper(optimizer, reduce_reduction="mean",
                                            fusion=1, fusion_id=-1, group="hccl_world_group"):  # pylint: disable=unused-argument
    """The Keras optimizer with gradients all-reduced over the ranks: at one rank, itself."""
    _ranks.require_single_rank("npu_device.distribute.npu_distributed_keras_optimizer_wrapper")
    return optimizer


__all__ = ["all_reduce", "broadcast", "shard_and_rebatch_dataset",
           "npu_distributed_keras_optimizer_wrapper"]
__getattr__ = _module_getattr(__name__, __all__)
