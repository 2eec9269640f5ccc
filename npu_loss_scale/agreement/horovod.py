"""Agreement ``horovod``: the sum over Horovod's ranks, bounded by Horovod's timeouts and by the
watchdog of :mod:`npu_loss_scale.agreement.watchdog` (a live rank that stops submitting)."""
import importlib
import os
import sys

from npu_loss_scale._internal.deadlines import bracket
from npu_loss_scale.agreement.base import STATUS_ALLREDUCE_NAME, Agreement
from npu_loss_scale.agreement.cluster import timeout_from_env, timeout_seconds
from npu_loss_scale.agreement.failures import record_reduce
from npu_loss_scale.agreement.watchdog import horovod_watchdog

_horovod_configured_timeout = None


def _horovod_timeout(timeout):
    """``timeout``, else the one of :func:`configure_horovod_timeouts`, else the environment's."""
    if timeout is not None:
        return timeout_seconds(timeout)
    if _horovod_configured_timeout is not None:
        return _horovod_configured_timeout
    return timeout_from_env()


class HorovodAgreement(Agreement):
    """Sums the status over all Horovod ranks: ``hvd.allreduce(status, op=hvd.Sum)``.

    ``hvd.init()`` must have run. A rank that dies makes Horovod shut down on the others
    ("Horovod has been shut down ..."); a rank that never joins is bounded by
    ``HOROVOD_GLOO_TIMEOUT_SECONDS`` (set by :func:`configure_horovod_timeouts`); a rank that
    stops calling the all-reduce by a watchdog: when this process's all-reduce has waited
    ``timeout`` seconds, Horovod is shut down, which fails the step on every rank.

    Args:
      timeout: seconds; default the one given to :func:`configure_horovod_timeouts`, else
        ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT``, else 300.
    """

    name = "horovod"

    def __init__(self, timeout=None):
        self.timeout = _horovod_timeout(timeout)
        try:
            self._hvd = importlib.import_module("horovod.tensorflow")
        except ImportError as err:
            raise ImportError("agreement 'horovod' needs horovod.tensorflow, which did not "
                              "import: %s. Build it with scripts/build_horovod.sh." % err) from err
        if not horovod_initialized(self._hvd):
            raise RuntimeError("agreement 'horovod': Horovod is not initialised. Call "
                               "horovod.tensorflow.init() before building the train op.")

    def reduce(self, status):
        def all_reduce(armed):
            out = self._hvd.allreduce(armed, op=self._hvd.Sum, name=STATUS_ALLREDUCE_NAME)
            record_reduce(out, self.name, self.timeout,
                          "hvd.allreduce over %d ranks" % self._hvd.size())
            return out

        _, done = bracket(horovod_watchdog, status, self.timeout, all_reduce,
                          name="agreement_watchdog")
        return done


def configure_horovod_timeouts(seconds=None):
    """Bounds how long Horovod ranks wait for a rank that died, never joined, or stalls.

    Sets, unless already set, the environment variables Horovod reads in ``hvd.init()``:
    ``HOROVOD_GLOO_TIMEOUT_SECONDS`` (rendezvous and Gloo transfers),
    ``HOROVOD_STALL_CHECK_TIME_SECONDS`` and ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`` (a live rank
    that stops submitting the all-reduce). Call it *before* ``hvd.init()``. ``seconds`` defaults
    to ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT``, else 300. Returns the variables it applies.

    Example::

        configure_horovod_timeouts(60)
        hvd.init()
    """
    global _horovod_configured_timeout
    seconds = timeout_seconds(seconds)
    _horovod_configured_timeout = seconds      # the watchdog of HorovodAgreement
    whole = str(max(1, int(round(seconds))))
    wanted = {
        "HOROVOD_GLOO_TIMEOUT_SECONDS": whole,
        "HOROVOD_STALL_CHECK_TIME_SECONDS": str(max(1, int(round(seconds)) // 2)),
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": whole,
    }
    applied = {}
    for key, value in wanted.items():
        applied[key] = os.environ.setdefault(key, value)
    return applied


def horovod_initialized(hvd):
    """Whether the Horovod module ``hvd`` says ``init()`` has run (False when it cannot say)."""
    try:
        return bool(hvd.is_initialized())
    except Exception:  # pylint: disable=broad-except
        return False


def horovod_ready():
    """Whether Horovod is imported and initialised in this process."""
    hvd = sys.modules.get("horovod.tensorflow")
    return hvd is not None and horovod_initialized(hvd)


def horovod_size():
    """The number of Horovod ranks, or None when Horovod is not initialised here."""
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is None or not horovod_initialized(hvd):
        return None
    try:
        return int(hvd.size())
    except Exception:  # pylint: disable=broad-except
        return None


__all__ = ["HorovodAgreement", "configure_horovod_timeouts", "horovod_initialized",
           "horovod_ready", "horovod_size"]
