"""Shim of ``npu_bridge.hccl.hccl_ops``: HCCL collectives on CPU.

With one rank (RANK_SIZE unset or 1) every collective is what the device computes for one rank:
the identity (all-reduce, broadcast, all-gather and reduce-scatter of one rank's tensor are that
tensor). In a rank of ``python -m npu_loss_scale.emulate --ranks N`` they are TensorFlow
collective ops across the N processes (reduce-scatter: an all-reduce of which each rank keeps
its part of axis 0) (graph mode; build them in the same order on every rank,
as HCCL requires too). With RANK_SIZE > 1 and no such group, NotImplementedError.
"""
import tensorflow as tf

from npu_bridge import _ranks
from npu_bridge._shim import module_getattr as _module_getattr

_REDUCTIONS = ("sum", "prod", "max", "min")
_MERGE = {"sum": "Add", "prod": "Mul", "max": "Max", "min": "Min"}


def _group(what):
    """The collective group of this rank, or None at one rank (raises without a group)."""
    if _ranks.rank_size() <= 1:
        return None
    from npu_loss_scale.ascend import ranks  # pylint: disable=import-outside-toplevel
    cluster = ranks.cluster()
    if cluster is None:
        _ranks.require_single_rank("hccl_ops." + what)
    return cluster


def _each(tensor, fn):
    if isinstance(tensor, (list, tuple)):
        return [fn(tf.convert_to_tensor(t)) for t in tensor]
    return fn(tf.convert_to_tensor(tensor))


def _collective(cluster, build):
    """``build(collectives, keys)`` on this rank's device: the TensorFlow collectives of this
    release (``_internal.compat.collectives``) and the group's keys, with a new instance key."""
    from npu_loss_scale._internal.compat import collectives  # pylint: disable=import-outside-toplevel
    with tf.device(cluster.device):
        return build(collectives, dict(group_size=cluster.group_size,
                                       group_key=cluster.group_key,
                                       instance_key=cluster.next_instance_key(),
                                       timeout=cluster.timeout))


def _one_rank(what, tensor):
    _ranks.require_single_rank("hccl_ops." + what)
    return _each(tensor, tf.identity)


def _check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError("reduction must be one of %s; got %r" % (", ".join(_REDUCTIONS),
                                                                  reduction))


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group="hccl_world_group"):  # pylint: disable=unused-argument
    """All-reduce (``reduction`` in sum/prod/max/min) over the ranks; a tensor or a list."""
    _check_reduction(reduction)
    cluster = _group("allreduce")
    if cluster is None:
        return _one_rank("allreduce", tensor)
    return _each(tensor, lambda t: _collective(cluster, lambda ops, kw: ops.all_reduce(
        t, _MERGE[reduction], **kw)))


def broadcast(tensor, root_rank, fusion=2, fusion_id=0, group="hccl_world_group"):  # pylint: disable=unused-argument
    """``tensor`` (a list of tensors, or one) of rank ``root_rank`` on every rank."""
    if isinstance(root_rank, bool) or not isinstance(root_rank, int) or root_rank < 0 \
            or root_rank >= _ranks.rank_size():
        raise ValueError("root_rank must be an int in [0, RANK_SIZE=%d); got %r"
                         % (_ranks.rank_size(), root_rank))
    cluster = _group("broadcast")
    if cluster is None:
        return _one_rank("broadcast", tensor)

    def from_root(t):
        mine = t if cluster.rank == root_rank else tf.zeros_like(t)
        return _collective(cluster, lambda ops, kw: ops.all_reduce(mine, "Add", **kw))

    return _each(tensor, from_root)


def allgather(tensor, rank_size, group="hccl_world_group"):  # pylint: disable=unused-argument
    """The ranks' tensors concatenated along axis 0 (``rank_size`` must be RANK_SIZE)."""
    if rank_size != _ranks.rank_size():
        raise ValueError("rank_size must equal RANK_SIZE=%d; got %r" % (_ranks.rank_size(),
                                                                       rank_size))
    cluster = _group("allgather")
    if cluster is None:
        return _one_rank("allgather", tensor)
    return _each(tensor, lambda t: _collective(cluster, lambda ops, kw: ops.all_gather(t, **kw)))


def reduce_scatter(tensor, reduction, rank_size, group="hccl_world_group", fusion=0,  # pylint: disable=unused-argument
                   fusion_id=-1):
    """Reduce over the ranks; rank ``r`` keeps part ``r`` of ``rank_size`` equal parts of axis 0.

    As HCCL's ReduceScatter: the ranks' tensors (same shape everywhere) are reduced element-wise
    with ``reduction``, axis 0 is cut into ``rank_size`` equal parts in rank order, and rank
    ``r`` gets rows ``[r * n, (r + 1) * n)`` with ``n = shape[0] / rank_size``. Axis 0 must be a
    multiple of ``rank_size`` (a ValueError when the shape is known, a failing assertion when it
    is not). A tensor or a list of tensors. (Argument order as in Huawei's documentation; pass
    ``fusion``/``fusion_id`` by keyword, they are HCCL tuning.)
    """
    _check_reduction(reduction)
    if rank_size != _ranks.rank_size():
        raise ValueError("rank_size must equal RANK_SIZE=%d; got %r" % (_ranks.rank_size(),
                                                                       rank_size))
    cluster = _group("reduce_scatter")
    if cluster is None:
        return _one_rank("reduce_scatter", tensor)
    return _each(tensor, lambda t: _scatter_part(cluster, t, reduction))


def _scatter_part(cluster, tensor, reduction):
    size = cluster.group_size
    if tensor.shape.rank == 0:
        raise ValueError("hccl_ops.reduce_scatter: tensor must have at least one dimension (axis "
                         "0 is divided among the %d ranks); got a scalar %r" % (size, tensor))
    rows = tf.compat.dimension_value(tensor.shape[0])   # a Dimension on TensorFlow 1.15
    checks = []
    if rows is not None and rows % size:
        raise ValueError("hccl_ops.reduce_scatter: axis 0 of tensor must be a multiple of "
                         "rank_size=%d; got shape %s" % (size, tensor.shape))
    if rows is None:
        checks.append(tf.debugging.assert_equal(
            tf.math.floormod(tf.shape(tensor)[0], size), 0,
            message="hccl_ops.reduce_scatter: axis 0 of tensor must be a multiple of rank_size=%d"
            % size))
    with tf.control_dependencies(checks):
        reduced = _collective(cluster, lambda ops, kw: ops.all_reduce(
            tensor, _MERGE[reduction], **kw))
    part = tf.shape(reduced)[0] // size
    out = reduced[cluster.rank * part:(cluster.rank + 1) * part]
    if rows is not None:
        out.set_shape([rows // size] + tensor.shape.as_list()[1:])
    return out


__all__ = ["allreduce", "broadcast", "allgather", "reduce_scatter"]
__getattr__ = _module_getattr(__name__, __all__)
