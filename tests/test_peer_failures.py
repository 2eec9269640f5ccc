"""Dying and slow peers: SIGKILLed, stalled and late ranks under Horovod and TF collectives.

The runs are ``scripts/peer_failures.py`` scenarios (short timeouts; the full matrix is the
script's own command, see docs/distributed.md). Each is bounded by a hard limit that kills
whatever is left, and checked by the script's ``check``: survivors fail with an
``AgreementError`` naming the backend and the timeout within timeout + 60 s of the fault, or
every rank completes when the late rank arrives in time; steps completed by several ranks left
identical states (no rank applied a step another skipped). On TF 1.15, whose collectives take
no timeout, the package's deadline ends a surviving rank with status 124 after logging the
all-reduce and the timeout, in the same bound.
"""
import os
import sys
import time

import pytest
import tensorflow as tf

from npu_loss_scale import agreement
from npu_loss_scale._internal.compat import collectives
from npu_loss_scale.agreement import watchdog

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dist_workers import harness  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import peer_failures  # noqa: E402  pylint: disable=wrong-import-position

TIMEOUT = 6.0


def _run(tmp_path, backend, n, fault):
    result = peer_failures.run_scenario(backend, n, fault, TIMEOUT, str(tmp_path),
                                        stall_extra=6.0, hard_limit=200)
    assert not result["hung"], "the run hung:\n" + result["output"][-4000:]
    problems = peer_failures.check(result, margin=60.0)
    assert problems == [], "\n".join(problems) + "\n" + result["output"][-4000:]
    return result


def _survivor_errors(result):
    return [info["error"] for rank, info in enumerate(result["ranks"])
            if rank != result["fault_rank"] and info["error"] is not None]


# -- messages (no processes) ----------------------------------------------------------------------
def test_a_timed_out_status_all_reduce_is_explained_with_backend_and_timeout():
    cluster = agreement.CollectiveCluster({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "worker", 0,
                                          timeout=7)
    with tf.Graph().as_default():
        out = agreement.CollectiveAgreement(cluster, instance_key=99).reduce(tf.zeros([1]))
        err = tf.errors.DeadlineExceededError(
            None, None, "Graph execution error:\n\nCollective has timed out during execution."
            "\n\t [[{{node %s}}]]" % out.op.name)
    with pytest.raises(agreement.AgreementError) as info:
        with agreement.failure_messages():
            raise err
    message = str(info.value)
    assert "'collective'" in message and "timeout of 7 s" in message, message
    assert "Collective has timed out during execution" in message, message
    assert info.value.backend == "collective" and info.value.timeout == 7.0
    assert info.value.__cause__ is err


def test_other_errors_pass_through_unchanged():
    err = tf.errors.InvalidArgumentError(None, None, "[[{{node some_other_op}}]] bad shape")
    assert agreement.explain_failure(err) is None
    with pytest.raises(tf.errors.InvalidArgumentError):
        with agreement.failure_messages():
            raise err


def test_the_horovod_watchdog_shuts_horovod_down_when_an_all_reduce_waits_too_long(monkeypatch):
    calls = []

    class FakeHorovod:
        @staticmethod
        def shutdown():
            calls.append(time.monotonic())

    monkeypatch.setitem(sys.modules, "horovod.tensorflow", FakeHorovod)
    dog = watchdog._Watchdog()  # pylint: disable=protected-access
    dog.disarm(dog.arm(0.3))           # an all-reduce that completed in time
    dog.arm(0.3, key=7)                # a run that failed elsewhere: never disarmed ...
    dog.disarm(dog.arm(0.3, key=7))    # ... the next run of the same all-reduce replaces it
    time.sleep(0.8)
    assert calls == [] and dog.fired is None
    started = time.monotonic()
    dog.arm(0.3)                       # one that never completes
    deadline = started + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(calls) == 1 and 0.3 <= calls[0] - started < 5
    assert dog.fired[0] == 0.3 and dog.fired[1] >= 0.3


# -- TF collectives -------------------------------------------------------------------------------
@pytest.mark.distributed
def test_collective_a_rank_sigkilled_mid_step_makes_the_other_fail_with_a_clear_error(tmp_path):
    result = _run(tmp_path, "collective", 2, "kill")
    errors = _survivor_errors(result)
    if not collectives.HAS_TIMEOUT:   # TF 1.15: the deadline ends the survivor (status 124)
        assert errors == [] and result["deadline_exits"] == [0], result["output"][-4000:]
        return
    assert len(errors) == 1 and errors[0]["backend"] == "collective"


@pytest.mark.distributed
def test_collective_a_stalled_rank_makes_the_three_others_fail_within_the_timeout(tmp_path):
    result = _run(tmp_path, "collective", 4, "stall")
    errors = _survivor_errors(result)
    # every survivor raised the AgreementError, but for a rank TF 2.21 itself crashed
    # (SIGSEGV or SIGABRT while its collective aborted; see scripts/peer_failures.py), which
    # check() names
    crashed = result.get("tf_crashes", [])
    if not collectives.HAS_TIMEOUT:   # TF 1.15: the deadline ends each survivor (status 124)
        assert errors == [] and crashed == [], result["output"][-4000:]
        assert result["deadline_exits"] == [0, 2, 3], result["output"][-4000:]
        return
    assert len(errors) + len(crashed) == 3 and len(errors) >= 1
    assert all(e["type"] == "AgreementError" and e["timeout"] == TIMEOUT for e in errors)


@pytest.mark.distributed
def test_collective_a_rank_that_starts_late_within_the_timeout_is_waited_for(tmp_path):
    result = _run(tmp_path, "collective", 2, "late")
    assert all(info["done"] for info in result["ranks"])


# -- Horovod --------------------------------------------------------------------------------------
@pytest.mark.distributed
@pytest.mark.skipif(harness.horovod_unavailable_reason() is not None,
                    reason="horovod is not importable here (%s); build it with "
                           "`bash scripts/build_horovod.sh <venv>`"
                           % harness.horovod_unavailable_reason())
class TestHorovod:
    def test_a_rank_sigkilled_mid_step_stops_the_three_others(self, tmp_path):
        result = _run(tmp_path, "horovod", 4, "kill")
        assert result["returncodes"][0] != 0

    def test_a_stalled_rank_makes_the_other_fail_within_the_timeout(self, tmp_path):
        result = _run(tmp_path, "horovod", 2, "stall")
        errors = _survivor_errors(result)
        assert len(errors) == 1 and errors[0]["type"] == "AgreementError", errors
        assert errors[0]["backend"] == "horovod" and errors[0]["timeout"] == TIMEOUT

    def test_a_rank_that_starts_late_within_the_timeout_is_waited_for(self, tmp_path):
        result = _run(tmp_path, "horovod", 2, "late")
        assert all(info["done"] for info in result["ranks"])


def test_check_names_a_tensorflow_crash_and_still_fails_a_silent_rank():
    """check() on made-up results (no processes): a survivor killed by SIGSEGV or SIGABRT during
    a stall's abort counts as TensorFlow's crash only while its own log shows TF's abort and
    another survivor raised the AgreementError; a survivor that stopped with neither an error
    nor such a crash is a problem."""
    message = ("npu_loss_scale agreement 'collective' (TF CollectiveReduceV2 over 4 processes) "
               "failed ...: not every rank took part within the timeout of 6 s")
    aborted = ("E0000 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
               "DEADLINE_EXCEEDED: Collective has timed out during execution.\n")

    def result(codes, errors, log=aborted):
        ranks = [{"records": [], "done": False, "log": log,
                  "error": {"type": "AgreementError", "message": message, "at": 106.0}
                  if errors[r] else None} for r in range(4)]
        return {"backend": "collective", "n": 4, "fault": "stall", "timeout": 6.0,
                "fault_rank": 1, "fault_step": 3, "steps": 6, "returncodes": codes,
                "hung": [], "fault_at": 100.0, "ranks": ranks, "output": ""}

    crashed = result([3, 3, -11, 3], [True, True, False, True])
    assert peer_failures.check(crashed) == [] and crashed["tf_crashes"] == [2]
    # TF 2.21 also stops a rank with SIGABRT: "Mutex corrupt" in its locks during the abort
    aborted_lock = result([3, 3, 3, -6], [True, True, True, False])
    assert peer_failures.check(aborted_lock) == [] and aborted_lock["tf_crashes"] == [3]
    # the same signal without TF's abort in the rank's log is not TensorFlow's known crash
    no_abort = result([3, 3, 3, -6], [True, True, True, False], log="Traceback ...\n")
    assert peer_failures.check(no_abort) == [
        "rank 3 stopped without a clear error (killed by signal 6)"]
    killed = result([3, 3, 3, -9], [True, True, True, False])
    assert peer_failures.check(killed) == [
        "rank 3 stopped without a clear error (killed by signal 9)"]
    alone = result([3, 3, -11, -11], [False, True, False, False])   # only the stalled rank
    assert peer_failures.check(alone) == [
        "rank 0 stopped without a clear error",
        "rank 2 stopped without a clear error (killed by signal 11)",
        "rank 3 stopped without a clear error (killed by signal 11)"]
    silent = result([3, 3, 0, 3], [True, True, False, True])
    assert peer_failures.check(silent) == ["rank 2 stopped without a clear error"]
