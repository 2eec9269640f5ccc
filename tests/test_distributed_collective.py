"""Overflow agreement over TensorFlow collectives, proven with real multi-process runs.

Two processes on loopback, each with its own ``tf.distribute.Server`` (cluster from TF_CONFIG),
train the same tiny fp16 model; only rank 1 overflows, at steps 2 and 5 (its forward pass
saturates, so only its emulated float-status register is set). See
``dist_workers/train_worker.py`` for the configurations.
"""
import os
import re

import pytest

import tf_versions
from dist_workers import harness
from npu_loss_scale._internal.compat import collectives
from dist_workers.checks import (OVERFLOW_STEPS, assert_diverged, assert_identical_after_every_step,
                                 assert_skipped_exactly, steps_of)

pytestmark = pytest.mark.distributed

TIMEOUT = "60"          # agreement timeout of the healthy runs (seconds)
FAILURE_TIMEOUT = "5"   # agreement timeout of the runs where a rank is missing


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """One 2-process run: configs agree (collective), alone (is_distributed=False), strategy."""
    result = harness.run_collective(
        tmp_path_factory.mktemp("collective"),
        worker_args=["--configs", "agree,alone,strategy", "--timeout", TIMEOUT], deadline=300)
    return result.completed_ranks(2, [0, 0])


def test_collective_agreement_every_rank_skips_exactly_the_steps_rank1_overflowed(two_workers):
    for rank_results in two_workers:
        assert_skipped_exactly(steps_of(rank_results, "agree"), OVERFLOW_STEPS, "agree")


def test_collective_agreement_keeps_scale_counters_step_and_variables_identical(two_workers):
    assert_identical_after_every_step(two_workers, "agree")


def test_without_is_distributed_the_ranks_diverge(two_workers):
    assert_diverged(two_workers, "alone")


def test_collective_agreement_adds_one_collective_per_step(two_workers):
    for rank_results in two_workers:
        assert rank_results["agree"]["collectives"] == 1
        assert rank_results["alone"]["collectives"] == 0


def test_is_distributed_false_in_a_multi_worker_run_warns(two_workers):
    for rank_results in two_workers:
        assert rank_results["alone"]["warned"] is True
        assert rank_results["agree"]["warned"] is False


def test_multi_worker_mirrored_strategy_averages_and_agrees(two_workers):
    """Composition with tf.distribute: MultiWorkerMirroredStrategy averages the gradients of
    ranks that see different data, and the optimizer's merge_call sums the status over the
    workers: every rank skips steps 2 and 5 and all state stays identical."""
    for rank_results in two_workers:
        assert_skipped_exactly(steps_of(rank_results, "strategy"), OVERFLOW_STEPS, "strategy")
        # the status all-reduce plus the strategy's gradient all-reduce(s)
        assert rank_results["strategy"]["collectives"] >= 2
    assert_identical_after_every_step(two_workers, "strategy")
    agree_w = steps_of(two_workers[0], "agree")[-1]["w"]
    strategy_w = steps_of(two_workers[0], "strategy")[-1]["w"]
    assert agree_w != strategy_w, "the strategy run trains on per-rank data, averaged"


def _assert_exited_after_the_timeout(result, rank):
    """TF 1.15: the CollectiveReduce cannot be stopped, so the waiting rank logs why and exits
    with status 124 (npu_loss_scale._internal.deadlines)."""
    with open(os.path.join(result.out_dir, "log.rank%d.txt" % rank)) as f:
        log = f.read()
    said = re.search(r"TensorFlow 1\.15\.\d+'s CollectiveReduce 'overflow_status_allreduce' "
                     r"waited ([0-9.]+) s, more than its timeout of 5 s", log)
    assert said, log[-4000:]
    assert 5 <= float(said.group(1)) < 30, said.group(0)
    assert "exits with status 124" in log, log[-4000:]


def _assert_clear_timeout(error, step):
    assert error is not None, "the surviving rank reported no error"
    assert error["step"] == step, error
    assert error["type"] == "DeadlineExceededError", error
    assert "timed out" in error["message"], error
    assert "overflow_status_allreduce" in error["message"], error


def test_a_rank_that_never_joins_makes_the_others_fail_within_the_timeout(tmp_path):
    result = harness.run_collective(
        tmp_path, worker_args=["--configs", "agree", "--timeout", FAILURE_TIMEOUT],
        start_ranks=[0], deadline=180)
    assert not result.timed_out, "rank 0 hung instead of failing:\n" + result.tail()
    if not collectives.HAS_TIMEOUT:
        assert result.returncodes == [124], result.tail()
        _assert_exited_after_the_timeout(result, 0)
        return
    assert result.returncodes == [3], result.tail()
    _assert_clear_timeout(result.error(0), step=0)


def test_a_rank_that_dies_makes_the_others_fail_within_the_timeout(tmp_path):
    result = harness.run_collective(
        tmp_path, worker_args=["--configs", "agree", "--timeout", FAILURE_TIMEOUT],
        per_rank_args={1: ["--die-rank", "1", "--die-step", "3"]}, deadline=180)
    assert not result.timed_out, "rank 0 hung instead of failing:\n" + result.tail()
    if not collectives.HAS_TIMEOUT:
        assert result.returncodes == [124, 17], result.tail()
        _assert_exited_after_the_timeout(result, 0)
        return
    assert result.returncodes == [3, 17], result.tail()
    _assert_clear_timeout(result.error(0), step=3)
    assert [r["step"] for r in result.load(0)["agree"]["steps"]] == [0, 1, 2]


@tf_versions.strategy_timeout_tf2_only
def test_strategy_rank_that_dies_makes_the_others_fail_within_the_operation_timeout(tmp_path):
    """Under MultiWorkerMirroredStrategy the all-reduces are the strategy's; in graph mode the
    session's operation_timeout_in_ms bounds them (see docs/distributed.md)."""
    result = harness.run_collective(
        tmp_path, worker_args=["--configs", "strategy", "--operation-timeout-ms", "5000"],
        per_rank_args={1: ["--die-rank", "1", "--die-step", "3"]}, deadline=180)
    assert not result.timed_out, "rank 0 hung instead of failing:\n" + result.tail()
    assert result.returncodes == [3, 17], result.tail()
    error = result.error(0)
    assert error["step"] == 3 and error["type"] == "DeadlineExceededError", error
    assert "timed out" in error["message"], error
