"""StepReport: every front end reports a step in one type, and a Session gives it back.

Each producer is driven through a clean step and an overflowed one; the expected verdicts come
from the step built (a gradient made to overflow, or not), not from the package.
"""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.device import localisation
from npu_loss_scale.pytest_plugin import assert_no_overflow, assert_step_skipped
from tf_versions import tf2_only


def test_a_report_reads_both_spellings_of_the_verdict_and_its_numbers():
    applied = nls.StepReport(finite=np.bool_(True), loss_scale=np.float32(8.0),
                             next_loss_scale=None, skipped_steps=np.int64(2))
    assert isinstance(applied, dict) and applied["finite"] is not None
    assert (applied.overflowed, applied.skipped, applied.checked) == (False, False, True)
    assert applied.loss_scale == 8.0 and type(applied.loss_scale) is float
    assert applied.details == {"loss_scale": 8.0, "skipped_steps": 2}
    hook_record = nls.StepReport(overflow=True, loss_scale=4.0, iteration=3, loss=1.5)
    assert (hook_record.overflowed, hook_record.skipped) == (True, True)
    assert hook_record.details == {"loss_scale": 4.0, "iteration": 3}
    unchecked = nls.StepReport(finite=None, loss_scale=8.0)
    assert unchecked.overflowed is None and not unchecked.checked
    sites_only = nls.StepReport(overflow=True, skipped=False, sites=1)
    assert (sites_only.overflowed, sites_only.skipped) == (True, False)
    assert nls.StepReport(overflow=False, scale=16.0).loss_scale == 16.0


def _optimizer_step():
    w = tf.compat.v1.get_variable("w", initializer=np.array([1.0, 2.0], np.float32))
    x = tf.compat.v1.placeholder(tf.float32, [], name="x")
    # 1e5 * w is beyond float16's 65504: saturated, the emulated register records it
    loss = tf.reduce_sum(tf.cast(nls.saturate(tf.cast(w * x, tf.float16)), tf.float32))
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01),
                                    nls.FixedLossScaleManager(8.0), backend="emulation")
    global_step = tf.compat.v1.train.get_or_create_global_step()
    return w, x, opt, opt.minimize(loss, global_step=global_step)


def test_session_run_gives_back_the_optimizers_report_as_a_step_report(graph, session):
    w, x, opt, train = _optimizer_step()
    fetches = opt.step_report
    assert isinstance(fetches, nls.StepReport)
    assert sorted(fetches) == ["finite", "global_step", "loss_scale", "next_loss_scale",
                               "skipped_steps"]
    session.run(tf.compat.v1.global_variables_initializer())
    _, clean = session.run([train, fetches], {x: 1.0})
    _, overflowed = session.run([train, fetches], {x: 1e5})
    for report in (clean, overflowed):
        assert type(report) is nls.StepReport and sorted(report) == sorted(fetches)
    assert (clean.overflowed, clean.skipped, clean.loss_scale) == (False, False, 8.0)
    assert (overflowed.overflowed, overflowed.skipped) == (True, True)
    assert overflowed["global_step"] == clean["global_step"] == 1   # the skipped step adds none
    assert overflowed["skipped_steps"] == 1
    assert_no_overflow(clean)
    assert_step_skipped(overflowed)
    assert_step_skipped(dict(overflowed))     # a plain dict of the same keys, as before


@pytest.mark.parametrize("case, keys", [
    # no global step passed to minimize(): no global_step
    ("no_global_step", ["finite", "loss_scale", "next_loss_scale", "skipped_steps"]),
    # accumulating: a run's report is built before it knows whether it decides, so no next
    # scale and no global_step
    ("accumulation", ["finite", "loss_scale", "skipped_steps"]),
    # and without an overflow check (else the step is the inner optimizer's, with no report):
    # no verdict either
    ("no_overflow_check", ["loss_scale", "skipped_steps"]),
    # Megatron's scaler does not tell the scale after the step before it runs: no next scale
    ("megatron_scaler", ["finite", "global_step", "loss_scale", "skipped_steps"]),
])
def test_what_a_step_cannot_tell_is_left_out_so_session_run_can_fetch_the_report(
        graph, session, case, keys):
    w = tf.compat.v1.get_variable("w", initializer=np.array([1.0, 2.0], np.float32))
    manager = {"no_global_step": nls.FixedLossScaleManager(8.0),
               "accumulation": nls.FixedLossScaleManager(8.0),
               "no_overflow_check": nls.FixedLossScaleManager(8.0, enable_overflow_check=False),
               "megatron_scaler": nls.DynamicGradScaler(8.0, 1.0, 2.0, 0.5, 1000, 2)}[case]
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01), manager,
                                    backend="emulation",
                                    accumulation_steps=2 if case in ("accumulation",
                                                                     "no_overflow_check") else 1)
    global_step = None if case == "no_global_step" else \
        tf.compat.v1.train.get_or_create_global_step()
    train = opt.minimize(tf.reduce_sum(w), global_step=global_step)
    assert sorted(opt.step_report) == keys
    session.run(tf.compat.v1.global_variables_initializer())
    _, report = session.run([train, opt.step_report])
    assert type(report) is nls.StepReport and sorted(report) == keys
    assert (report.loss_scale, report["skipped_steps"]) == (8.0, 0)
    if case == "no_overflow_check":
        assert report.overflowed is None
        with pytest.raises(ValueError, match="the step has no overflow check"):
            assert_no_overflow(report)
    else:
        assert_no_overflow(report)


def test_without_an_overflow_check_the_step_is_the_inner_optimizers_and_has_no_report(graph):
    w = tf.compat.v1.get_variable("w", initializer=np.array([1.0, 2.0], np.float32))
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01),
                                    nls.FixedLossScaleManager(8.0, enable_overflow_check=False),
                                    backend="emulation")
    opt.minimize(tf.reduce_sum(w))
    with pytest.raises(RuntimeError, match="with enable_overflow_check=False .and no "
                                           "accumulation. a step is the inner optimizer's"):
        opt.step_report  # pylint: disable=pointless-statement


def test_the_hooks_records_and_its_step_report_are_step_reports(graph, session):
    w, x, opt, train = _optimizer_step()
    hook = nls.LossScaleHook(optimizer=opt, every_n_steps=10, log_fn=lambda line: None)
    with pytest.raises(ValueError, match="recorded no step yet"):
        hook.step_report   # pylint: disable=pointless-statement
    hook.begin()
    session.run(tf.compat.v1.global_variables_initializer())
    hook.after_create_session(session, None)
    for value in (1.0, 1e5):
        args = hook.before_run(None)
        values = session.run([train, args.fetches], {x: value})[1]
        hook.after_run(None, tf.compat.v1.train.SessionRunValues(values, None, None))
    assert all(type(record) is nls.StepReport for record in hook.history)
    assert [record.overflowed for record in hook.history] == [False, True]
    assert hook.step_report is hook.history[-1]


def test_a_localisation_record_gives_its_step_report():
    sites = [localisation.OverflowSite("dense/MatMul", "forward", tf.float16, 1e5)]
    skipped = localisation.StepOverflowRecord(7, sites, skipped=True).step_report
    assert type(skipped) is nls.StepReport
    assert (skipped.overflowed, skipped.skipped, skipped.details) == (
        True, True, {"step": 7, "sites": 1})
    applied = localisation.StepOverflowRecord(8, sites, skipped=False).step_report
    assert (applied.overflowed, applied.skipped) == (True, False)


@tf2_only
def test_the_grad_scaler_reports_its_iteration_between_step_and_update():
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=8.0, backend="emulation")
    with pytest.raises(ValueError, match=r"before scaler.update\(\)"):
        scaler.step_report   # pylint: disable=pointless-statement
    scaler.step(opt, [(tf.constant([np.inf]), var)])
    report = scaler.step_report
    assert type(report) is nls.StepReport
    assert (report.overflowed, report.skipped, report.loss_scale) == (True, True, 8.0)
    scaler.update()                                   # backs off to 4
    scaler.step(opt, [(tf.constant([4.0]), var)])
    report = scaler.step_report
    assert (report.overflowed, report.loss_scale) == (False, 4.0)
    scaler.update()


@tf2_only
def test_the_keras_optimizer_reports_its_latest_step():
    from npu_loss_scale.keras import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    var = tf.Variable([1.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), initial_scale=4.0)
    opt.apply_gradients([(tf.constant([np.inf]), var)])
    report = opt.step_report
    assert type(report) is nls.StepReport
    # the scale after the step, halved after the overflow; the scale the step used (4) is not
    # kept, and loss_scale means that one for every front end
    assert (report.overflowed, report["next_loss_scale"], report.loss_scale) == (True, 2.0, None)
    opt.apply_gradients([(tf.constant([4.0]), var)])
    assert opt.step_report.overflowed is False

