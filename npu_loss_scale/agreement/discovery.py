"""Which agreement to use: the one asked for by name, else the first that is ready, in the order
of the package docstring (:mod:`npu_loss_scale.agreement`)."""
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import probe
from npu_loss_scale.agreement.base import AGREEMENT_NAMES, Agreement, StrategyAgreement
from npu_loss_scale.agreement.collective import CollectiveAgreement, collective_ready
from npu_loss_scale.agreement.hccl import HcclAgreement, hccl_ready
from npu_loss_scale.agreement.horovod import HorovodAgreement, horovod_ready


def _strategy_spans_processes(strategy):
    extended = strategy.extended
    probe = getattr(extended, "_in_multi_worker_mode", None)
    if callable(probe):
        try:
            return bool(probe())
        except Exception:  # pylint: disable=broad-except
            return False
    # TF 1.15's multi-worker strategy has no such probe; it keeps its worker count.
    workers = getattr(extended, "_num_workers", None)
    return isinstance(workers, int) and workers > 1


def _discover(backend_name):
    """The name of the agreement discovery picks, or None (see the module docstring)."""
    strategy = tf.distribute.get_strategy() if tf.distribute.has_strategy() else None
    if strategy is not None and _strategy_spans_processes(strategy):
        return "strategy"
    if hccl_ready(backend_name):
        return "hccl"
    if horovod_ready():
        return "horovod"
    if collective_ready():
        return "collective"
    if strategy is not None:
        return "strategy"
    return None


_FACTORIES = {"strategy": StrategyAgreement, "hccl": HcclAgreement,
              "horovod": HorovodAgreement, "collective": CollectiveAgreement}


def agreement_name(choice=None, backend_name=None):
    """Which agreement ``make_agreement(choice, backend_name)`` would use now, or None.

    ``backend_name`` defaults to the detection backend in force (see
    :func:`npu_loss_scale.get_backend_name`).

    Example::

        hvd.init()
        assert agreement_name() == "horovod"
    """
    if isinstance(choice, Agreement):
        return choice.name
    if choice is not None:
        return _checks.one_of("agreement", choice, AGREEMENT_NAMES)
    if backend_name is None:
        backend_name = probe.get_backend_name()
    return _discover(backend_name)


def make_agreement(choice, backend_name):
    """Returns the :class:`Agreement` to use with ``is_distributed=True``; raises if there is none.

    ``choice``: an :class:`Agreement`, one of :data:`AGREEMENT_NAMES`, or None to discover.
    """
    if isinstance(choice, Agreement):
        return choice
    if choice is not None:
        return _FACTORIES[_checks.one_of("agreement", choice, AGREEMENT_NAMES)]()
    name = _discover(backend_name)
    if name is None:
        raise RuntimeError(
            "is_distributed=True, but there is nothing to agree on the overflow status through: "
            "no tf.distribute strategy is in scope, npu_bridge HCCL is not available (it needs "
            "the 'npu' backend; this one is %r), Horovod is not initialised (call hvd.init() "
            "first), and no TF collective group is configured (call "
            "npu_loss_scale.agreement.configure_collective(...) or set TF_CONFIG). Pass "
            "agreement= one of %s, or is_distributed=False for a single process."
            % (backend_name, ", ".join(AGREEMENT_NAMES)))
    return _FACTORIES[name]()


__all__ = ["agreement_name", "make_agreement"]
