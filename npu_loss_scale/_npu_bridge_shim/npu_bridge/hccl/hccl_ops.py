"""Shim of ``npu_bridge.hccl.hccl_ops``: HCCL collectives of a single emulated rank.

With one rank (RANK_SIZE unset or 1) every collective is what the device computes for one rank:
the identity (all-reduce, broadcast, all-gather and reduce-scatter of one rank's tensor are that
tensor). With RANK_SIZE > 1 they raise NotImplementedError: the CPU shim has no HCCL transport
yet (see the README: Horovod or a tf.distribute strategy carry several processes).
"""
import tensorflow as tf

from npu_bridge import _ranks
from npu_bridge._shim import module_getattr as _module_getattr

_REDUCTIONS = ("sum", "prod", "max", "min")


def _one_rank(what, tensor):
    _ranks.require_single_rank("hccl_ops." + what)
    if isinstance(tensor, (list, tuple)):
        return [tf.identity(t) for t in tensor]
    return tf.identity(tensor)


def _check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError("reduction must be one of %s; got %r" % (", ".join(_REDUCTIONS),
                                                                  reduction))


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group="hccl_world_group"):  # pylint: disable=unused-argument
    """All-reduce (``reduction`` in sum/prod/max/min) over the ranks; a tensor or a list."""
    _check_reduction(reduction)
    return _one_rank("allreduce", tensor)


def broadcast(tensor, root_rank, fusion=2, fusion_id=0, group="hccl_world_group"):  # pylint: disable=unused-argument
    """``tensor`` (a list of tensors, or one) of rank ``root_rank`` on every rank."""
    if isinstance(root_rank, bool) or not isinstance(root_rank, int) or root_rank < 0 \
            or root_rank >= _ranks.rank_size():
        raise ValueError("root_rank must be an int in [0, RANK_SIZE=%d); got %r"
                         % (_ranks.rank_size(), root_rank))
    return _one_rank("broadcast", tensor)


def allgather(tensor, rank_size, group="hccl_world_group"):  # pylint: disable=unused-argument
    """The ranks' tensors concatenated along axis 0 (``rank_size`` must be RANK_SIZE)."""
    if rank_size != _ranks.rank_size():
        raise ValueError("rank_size must equal RANK_SIZE=%d; got %r" % (_ranks.rank_size(),
                                                                       rank_size))
    return _one_rank("allgather", tensor)


def reduce_scatter(tensor, reduction, rank_size, group="hccl_world_group"):  # pylint: disable=unused-argument
    """Reduce over the ranks, each rank keeping its 1/rank_size slice of axis 0."""
    _check_reduction(reduction)
    if rank_size != _ranks.rank_size():
        raise ValueError("rank_size must equal RANK_SIZE=%d; got %r" % (_ranks.rank_size(),
                                                                       rank_size))
    return _one_rank("reduce_scatter", tensor)


__all__ = ["allreduce", "broadcast", "allgather", "reduce_scatter"]
__getattr__ = _module_getattr(__name__, __all__)
