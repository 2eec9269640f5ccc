"""What ``--overflow-report`` and ``--advise`` of ``python -m npu_loss_scale.emulate`` do around
the script: the localisation report and the advisor's advice, written per rank."""
import contextlib
import sys

from npu_loss_scale._internal import messages as _messages
from npu_loss_scale.device import localisation
from npu_loss_scale.device.overflow_report import per_rank
from npu_loss_scale.tools import advisor


@contextlib.contextmanager
def entry_point_tools(overflow_report=None, advise=None, advise_loss_scale=1.0):
    """What ``python -m npu_loss_scale.emulate --overflow-report FILE --advise FILE`` does around
    the script: localisation on (observe mode with ``advise``), the JSON-lines report written to
    ``overflow_report``, and at the end the advice (:mod:`npu_loss_scale.tools.advisor`) printed to
    stderr and written as JSON to ``advise`` (where the files went is logged on the
    ``npu_loss_scale`` logger at INFO, which the command shows). In a rank of several (``--ranks
    N``) each file name gets ``.rank<RANK_ID>`` before its extension."""
    if overflow_report is None and advise is None:
        yield
        return
    # the file names first: a bad RANK_SIZE or RANK_ID refuses them before anything changes
    overflow_report, advise = per_rank(overflow_report), per_rank(advise)
    observe = advise is not None
    previous = localisation.set_mode(localisation.OBSERVE if observe else localisation.OVERFLOW)
    if overflow_report is not None:
        localisation.set_report_path(overflow_report)
    if advise is not None:
        localisation.clear_observations()
    try:
        yield
    finally:
        localisation.set_mode(previous)
        if overflow_report is not None:
            count = len(localisation.records())
            localisation.set_report_path(None)
            _messages.logger.info("overflow report %s: %d overflowed step%s recorded",
                                  overflow_report, count, "" if count == 1 else "s")
        if advise is not None:
            advice = advisor.advise(loss_scale=advise_loss_scale)
            advisor.write_advice(advice, advise)
            print(advice.report(), file=sys.stderr)
            _messages.logger.info("advice written to %s", advise)


__all__ = [
    "entry_point_tools",
]
