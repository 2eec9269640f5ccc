"""Shim of ``npu_device.distribute``: HCCL collectives of the TF2 adapter on CPU.

In a rank of ``python -m npu_loss_scale.emulate --ranks N`` whose ``npu_device.open()`` joined
the emulated cluster (RANK_SIZE = N > 1), these are TensorFlow collective ops across the N
processes (see :mod:`npu_device.distribute._collectives`), eagerly and inside ``tf.function``:

* ``all_reduce(values, reduction="mean")``: a tensor, or a list/tuple of them (``None`` entries
  stay ``None``; a list comes back), reduced over the ranks with ``mean``, ``sum``, ``max``,
  ``min`` or ``prod``. ``mean`` is the sum times ``1/N`` for floats and the float quotient for
  integers, as on the device.
* ``broadcast(variables, root_rank=0)``: assigns rank ``root_rank``'s values to the variables
  (one variable or a list) of every rank; returns None (in a TF1 graph: the assign op to run).
* ``shard_and_rebatch_dataset(dataset, global_bs)``: ``(dataset.shard(N, rank), global_bs //
  N)``; a ``global_bs`` that N does not divide is a ValueError, as on the device.
* ``npu_distributed_keras_optimizer_wrapper(optimizer, reduce_reduction="mean")``: the same
  Keras optimizer (a name such as ``"adam"`` is looked up), whose gradients are all-reduced
  before they are applied: Keras 2 through its ``apply_gradients``, Keras 3 through ``apply``
  (which ``apply_gradients``, ``model.fit`` and a LossScaleOptimizer around it call).

Every rank must run the collectives in the same order, as HCCL requires. With one rank
(RANK_SIZE unset or 1) the device computes the identity: ``all_reduce`` gives the values back,
``broadcast`` and the wrapper change nothing, the dataset and batch are this rank's. In a
``--ranks`` run before ``npu_device.open()``, as on the device, the calls do nothing (a
warning says so). With RANK_SIZE > 1 outside a ``--ranks`` run, NotImplementedError.
"""
import numbers
import warnings

import tensorflow as tf

from npu_bridge import _ranks
from npu_bridge._shim import NotEmulatedError
from npu_bridge._shim import module_getattr as _module_getattr
from npu_device.distribute import _collectives

_REDUCTIONS = _collectives.REDUCTIONS
WORLD_GROUP = "hccl_world_group"
_warned = set()


class DeviceNotOpenWarning(RuntimeWarning):
    """An ``npu_device.distribute`` call in a rank of ``--ranks N`` before ``npu_device.open()``:
    as on the device, it does nothing."""


def _check_reduction(name, reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError("%s must be one of %s; got %r" % (name, ", ".join(_REDUCTIONS),
                                                           reduction))


def _check_ranks_run(what, group):
    """Raises unless this process is a rank of a ``--ranks`` run and ``group`` is the world."""
    from npu_loss_scale.ascend import ranks  # pylint: disable=import-outside-toplevel
    if ranks.cluster() is None:
        _ranks.require_single_rank(what)
    if group != WORLD_GROUP:
        raise NotEmulatedError(
            "%s(group=%r): collectives over a group other than %r are not emulated on CPU by "
            "npu_loss_scale" % (what, group, WORLD_GROUP), name="npu_device")


def _cluster_device(what, group):
    """The opened device when this process is one of several ranks, else None."""
    if _ranks.rank_size() <= 1:
        return None
    _check_ranks_run(what, group)
    from npu_device import _cluster  # pylint: disable=import-outside-toplevel
    device = _cluster.global_npu_ctx()
    if device is None or not device.is_cluster_worker():
        if what not in _warned:
            _warned.add(what)
            warnings.warn("%s: npu_device.open() has not been called in this rank of RANK_SIZE="
                          "%d ranks, so, as on the device, nothing is exchanged with the other "
                          "ranks. Call npu_device.open() first." % (what, _ranks.rank_size()),
                          DeviceNotOpenWarning, stacklevel=3)
        return None
    return device


def all_reduce(values, reduction="mean", fusion=1, fusion_id=-1, group=WORLD_GROUP):  # pylint: disable=unused-argument
    """``values`` reduced over the ranks (see the module docstring); fusion is HCCL tuning."""
    _check_reduction("reduction", reduction)
    device = _cluster_device("npu_device.distribute.all_reduce", group)
    listed = isinstance(values, (list, tuple))
    items = list(values) if listed else [values]
    if device is None:
        out = [None if v is None else tf.identity(v) for v in items]
    else:
        reduced = iter(_collectives.all_reduce([v for v in items if v is not None], reduction,
                                               device.workers_num))
        out = [None if v is None else next(reduced) for v in items]
    return out if listed else out[0]


def _check_variables(values):
    items = list(values) if isinstance(values, (list, tuple)) else [values]
    for i, v in enumerate(items):
        if not callable(getattr(v, "assign", None)):
            raise TypeError("broadcast: values must be a variable or a list of variables (what "
                            "can be assigned); got %r (type %s) at position %d"
                            % (v, type(v).__name__, i))
    return items


def broadcast(values, root_rank=0, fusion=2, fusion_id=0, group=WORLD_GROUP):  # pylint: disable=unused-argument
    """Assigns rank ``root_rank``'s values of the variables to every rank."""
    items = _check_variables(values)
    size = _ranks.rank_size()
    if isinstance(root_rank, bool) or not isinstance(root_rank, numbers.Integral) \
            or not 0 <= root_rank < max(size, 1):
        raise ValueError("root_rank must be an int in [0, RANK_SIZE=%d); got %r"
                         % (max(size, 1), root_rank))
    device = _cluster_device("npu_device.distribute.broadcast", group)
    if device is None or not items:
        return None
    new = _collectives.broadcast(items, int(root_rank), device.worker_id)
    assigns = [v.assign(n) for v, n in zip(items, new)]
    if not tf.compat.v1.executing_eagerly_outside_functions():
        return tf.group(*assigns)  # a TF1 graph: the op that broadcasts, to run in a session
    return None


def shard_and_rebatch_dataset(dataset, global_bs):
    """``(this rank's shard of dataset, the per-rank batch size)``; see the module docstring."""
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError("shard_and_rebatch_dataset: dataset must be a tf.data.Dataset; got %r "
                        "(type %s)" % (dataset, type(dataset).__name__))
    if isinstance(global_bs, bool) or not isinstance(global_bs, numbers.Integral) \
            or global_bs < 1:
        raise ValueError("shard_and_rebatch_dataset: global_bs must be an int >= 1 (the batch "
                         "size over all ranks); got %r" % (global_bs,))
    device = _cluster_device("npu_device.distribute.shard_and_rebatch_dataset", WORLD_GROUP)
    if device is None:
        return dataset, global_bs
    workers = device.workers_num
    if global_bs % workers:
        raise ValueError("shard_and_rebatch_dataset: global_bs must be divisible by the number "
                         "of ranks %d; got %r" % (workers, global_bs))
    return dataset.shard(workers, device.worker_id), int(global_bs) // workers


def npu_distributed_keras_optimizer_wrapper(optimizer, reduce_reduction="mean",
                                            fusion=1, fusion_id=-1, group=WORLD_GROUP):  # pylint: disable=unused-argument
    """The Keras optimizer, with its gradients all-reduced over the ranks before they are
    applied (see the module docstring); at one rank, the optimizer itself."""
    _check_reduction("reduce_reduction", reduce_reduction)
    from npu_device.distribute import _keras  # pylint: disable=import-outside-toplevel
    optimizer = _keras.keras_optimizer(optimizer)
    if _ranks.rank_size() <= 1:
        return optimizer
    _check_ranks_run("npu_device.distribute.npu_distributed_keras_optimizer_wrapper", group)
    return _keras.all_reduce_gradients(optimizer, reduce_reduction, all_reduce)


__all__ = ["all_reduce", "broadcast", "shard_and_rebatch_dataset",
           "npu_distributed_keras_optimizer_wrapper"]
__getattr__ = _module_getattr(__name__, __all__, package=True)
