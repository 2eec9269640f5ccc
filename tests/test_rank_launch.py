"""The one loop that waits for N ranks (``ascend.ranks.wait_ranks``), which both
``python -m npu_loss_scale.emulate --ranks N`` and the ``npu_ranks`` fixture use: a failed rank
stops the others (after a grace period), a timeout kills what still runs.

Stand-in ranks are tiny Python processes, so these take well under a second each.
"""
import signal
import subprocess
import sys
import time

from npu_loss_scale.ascend import ranks


def _rank(code=0, sleep=0.0):
    return subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(%r); "
                                                   "sys.exit(%d)" % (sleep, code)])


def test_all_ranks_that_succeed_give_zero_codes():
    codes, failures, timed_out = ranks.wait_ranks([_rank(), _rank(sleep=0.2)], poll_seconds=0.05)
    assert (codes, failures, timed_out) == ([0, 0], [], set())


def test_a_failed_rank_stops_the_others_at_once_with_sigterm():
    procs = [_rank(sleep=30), _rank(code=3)]
    started = time.monotonic()
    codes, failures, timed_out = ranks.wait_ranks(procs, poll_seconds=0.05)
    assert codes == [-signal.SIGTERM, 3] and failures == [3] and timed_out == set()
    assert time.monotonic() - started < 10


def test_with_a_grace_period_the_others_may_finish_then_are_killed():
    procs = [_rank(code=0, sleep=0.5), _rank(sleep=30), _rank(code=5)]
    codes, failures, timed_out = ranks.wait_ranks(procs, grace=3.0, poll_seconds=0.05,
                                                  kill=True)
    assert codes == [0, -signal.SIGKILL, 5] and failures == [5] and timed_out == set()


def test_at_the_timeout_what_still_runs_is_killed_and_named():
    procs = [_rank(), _rank(sleep=30)]
    started = time.monotonic()
    codes, failures, timed_out = ranks.wait_ranks(procs, timeout=1.0, poll_seconds=0.05)
    assert codes == [0, -signal.SIGKILL] and failures == [] and timed_out == {1}
    assert 1.0 <= time.monotonic() - started < 10


def test_interrupted_waiting_kills_the_ranks(monkeypatch):
    procs = [_rank(sleep=30)]

    def interrupted(_):
        raise KeyboardInterrupt
    monkeypatch.setattr(ranks.time, "sleep", interrupted)
    try:
        ranks.wait_ranks(procs)
    except KeyboardInterrupt:
        pass
    assert procs[0].poll() == -signal.SIGKILL
