"""Agreement across ranks on the overflow status: every rank applies or skips the same steps.

With ``is_distributed=True`` the status of each rank is summed over all ranks with one collective
per step, so a rank that overflowed makes every rank skip. The ways to agree:

``strategy``
    Inside a ``tf.distribute`` strategy the optimizer already reduces the status over the
    strategy's replicas (and workers); nothing more is needed.
``hccl``
    ``npu_bridge.hccl.hccl_ops.allreduce(status, "sum")`` on Ascend devices.
``horovod``
    ``horovod.tensorflow.allreduce(status, op=Sum)`` after ``hvd.init()``.

Chosen by the optimizer's ``agreement=`` argument or discovered in that order. When
``is_distributed=True`` and none is available, building the train op raises an error instead of
letting ranks silently diverge.
"""
import importlib
import sys

import tensorflow as tf

from . import _checks

AGREEMENT_NAMES = ("strategy", "hccl", "horovod")


class Agreement:
    name = None

    def reduce(self, status):
        raise NotImplementedError

    def __repr__(self):
        return "<%s agreement>" % self.name


class StrategyAgreement(Agreement):
    """The tf.distribute strategy reduces the status itself (see NPULossScaleOptimizer)."""

    name = "strategy"

    def reduce(self, status):
        return status


class HcclAgreement(Agreement):
    name = "hccl"

    def __init__(self):
        self._ops = importlib.import_module("npu_bridge.hccl.hccl_ops")

    def reduce(self, status):
        return self._ops.allreduce(status, "sum", fusion=0)


class HorovodAgreement(Agreement):
    name = "horovod"

    def __init__(self):
        self._hvd = importlib.import_module("horovod.tensorflow")

    def reduce(self, status):
        return self._hvd.allreduce(status, op=self._hvd.Sum, name="overflow_status_allreduce")


def _horovod_ready():
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is None:
        return False
    try:
        return bool(hvd.is_initialized())
    except Exception:  # pylint: disable=broad-except
        return False


def _hccl_ready(backend_name):
    if backend_name != "npu":
        return False
    try:
        importlib.import_module("npu_bridge.hccl.hccl_ops")
    except ImportError:
        return False
    return True


def make_agreement(agreement, backend_name):
    """Returns the Agreement to use with ``is_distributed=True``; raises if there is none."""
    if agreement is not None:
        if isinstance(agreement, Agreement):
            return agreement
        name = _checks.one_of("agreement", agreement, AGREEMENT_NAMES)
        return {"strategy": StrategyAgreement, "hccl": HcclAgreement,
                "horovod": HorovodAgreement}[name]()
    if tf.distribute.has_strategy():
        return StrategyAgreement()
    if _hccl_ready(backend_name):
        return HcclAgreement()
    if _horovod_ready():
        return HorovodAgreement()
    raise RuntimeError(
        "is_distributed=True, but there is nothing to agree on the overflow status through: "
        "no tf.distribute strategy is in scope, npu_bridge HCCL is not available, and Horovod "
        "is not initialised (call hvd.init() first). Pass agreement= one of %s, or "
        "is_distributed=False for a single process." % ", ".join(AGREEMENT_NAMES))
