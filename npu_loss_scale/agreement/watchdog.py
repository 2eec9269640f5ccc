"""The watchdog that bounds a Horovod status all-reduce which waits too long.

One watchdog serves the process (:data:`horovod_watchdog`): agreement ``horovod`` brackets each
all-reduce with it (:func:`npu_loss_scale._internal.deadlines.bracket`), and
:func:`npu_loss_scale.agreement.explain_failure` reads whether it fired.
"""
import sys

from npu_loss_scale._internal import messages as _messages
from npu_loss_scale._internal.deadlines import Watchdog


def _shut_horovod_down(timeout, waited, label):  # pylint: disable=unused-argument
    """Horovod has no timeout of its own for a rank that is alive but stops submitting the
    all-reduce (0.28.1 with Gloo neither warns nor shuts down on its stall settings, measured);
    ``hvd.shutdown()`` fails the pending all-reduce on every rank ("Horovod has been shut
    down"), so ``session.run`` returns an error instead of waiting forever."""
    _messages.logger.error(
        "agreement 'horovod': the overflow-status all-reduce waited %.1f s, more than "
        "the timeout of %g s (a rank died, stalls, or never joined); shutting Horovod "
        "down so that every rank fails instead of waiting.", waited, timeout)
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is not None:
        try:
            hvd.shutdown()
        except Exception:  # pylint: disable=broad-except
            pass


class _Watchdog(Watchdog):
    """Shuts Horovod down when a status all-reduce of this process waits longer than its
    timeout."""

    def __init__(self):
        super().__init__(_shut_horovod_down)


horovod_watchdog = _Watchdog()

__all__ = ["horovod_watchdog"]
