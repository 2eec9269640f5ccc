"""LossScaleHook: log lines, per-iteration history, TensorBoard scalars — and the plot script."""
import importlib.util
import os

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.frontends.hooks import SUMMARY_TAGS, LossScaleHook
from npu_loss_scale.scaling.reference.ascend import ExponentialUpdateRule

HERE = os.path.dirname(os.path.abspath(__file__))
INF = float("inf")


def _load_plot_script():
    path = os.path.join(HERE, "..", "scripts", "plot_loss_scale.py")
    spec = importlib.util.spec_from_file_location("plot_loss_scale", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(manager, lr=0.5):
    w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 1.0]), use_resource=True)
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    loss = tf.reduce_sum(w * x, name="loss")
    step = tf.compat.v1.train.get_or_create_global_step()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr), manager)
    train = opt.minimize(loss, global_step=step)
    return opt, train, x, loss


def _run(hooks, train, x, feeds):
    with tf.compat.v1.train.MonitoredSession(hooks=hooks) as session:
        for value in feeds:
            session.run(train, {x: value})


# Iterations 3, 4 and 7 overflow (1-based).
FEEDS = [[1.0, 1.0]] * 2 + [[INF, 1.0]] * 2 + [[1.0, 1.0]] * 2 + [[1.0, INF]] + [[1.0, 1.0]] * 3
OVERFLOWED = [False, False, True, True, False, False, True, False, False, False]


def _manager():
    return nls.ExponentialUpdateLossScaleManager(init_loss_scale=2.0 ** 10, incr_every_n_steps=4,
                                                 decr_every_n_nan_or_inf=2, decr_ratio=0.5)


def _expected_scales():
    """The scale each iteration used, from the package's pure-Python reference rule."""
    rule = ExponentialUpdateRule(2.0 ** 10, 4, 2, decr_ratio=0.5)
    scales = []
    for overflowed in OVERFLOWED:
        scales.append(float(rule.loss_scale))
        rule.update(not overflowed)
    return scales


def test_history_records_scale_overflow_skipped_and_global_step_per_iteration(graph, tmp_path):
    opt, train, x, loss = _build(_manager())
    lines = []
    hook = LossScaleHook(optimizer=opt, every_n_steps=5, loss=loss, log_fn=lines.append)
    _run([hook], train, x, FEEDS)

    history = hook.history
    assert [h["iteration"] for h in history] == list(range(1, 11))
    assert [h["overflow"] for h in history] == OVERFLOWED
    assert [h["loss_scale"] for h in history] == _expected_scales()
    assert [h["skipped_steps"] for h in history] == list(np.cumsum(OVERFLOWED))
    # A skipped step does not advance global_step.
    assert [h["global_step"] for h in history] == list(np.cumsum(np.logical_not(OVERFLOWED)))
    assert hook.skipped_steps == 3
    assert history[0]["loss"] == pytest.approx(2.0)


def test_a_record_left_by_an_earlier_localised_graph_is_not_this_steps(graph):
    """Localisation on for another graph of the process, then off: its last record stays the
    process's latest, and no step of this graph may take it for its own."""
    from npu_loss_scale.device import localisation  # pylint: disable=import-outside-toplevel
    localisation.enable()
    try:
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            sess.run(nls.saturate(tf.constant([7e4], tf.float32) * tf.constant(1.0)))
            y = nls.saturate(tf.cast(tf.constant([7e4]), tf.float16))
            with tf.control_dependencies([y]):   # the read after the saturation it reports
                status = nls.emulation.npu_get_float_status_v2()
            sess.run([y, status])
        assert localisation.last_record() is not None
    finally:
        localisation.disable()
    opt, train, x, loss = _build(_manager())
    hook = LossScaleHook(optimizer=opt, every_n_steps=5, loss=loss, log_fn=lambda line: None)
    _run([hook], train, x, FEEDS)
    assert [h["overflow_record"] for h in hook.history] == [None] * len(FEEDS)


def test_log_lines_every_n_iterations_and_on_every_overflow(graph):
    opt, train, x, loss = _build(_manager())
    lines = []
    _run([LossScaleHook(optimizer=opt, every_n_steps=5, loss=loss, log_fn=lines.append)],
         train, x, FEEDS)
    overflow_lines = [l for l in lines if l.startswith("overflow at iteration")]
    assert [l.split()[3] for l in overflow_lines] == ["3", "4", "7"]
    assert "loss scale 1024 -> 512, skipped steps 2" in overflow_lines[1]  # the 2nd halves it
    assert "(global step 2)" in overflow_lines[0]
    periodic = [l for l in lines if l.startswith("loss scale ")]
    assert len(periodic) == 2
    assert "iteration 5" in periodic[0] and "skipped steps 2 (+2)" in periodic[0]
    assert "global step 3" in periodic[0] and "overflow no" in periodic[0]
    assert "iteration 10" in periodic[1] and "skipped steps 3 (+1)" in periodic[1]
    assert lines[-1] == ("training ended: 10 iterations, 3 skipped steps in total (30.0% of "
                         "this session's), loss scale now 512")


def test_log_overflows_off_keeps_only_periodic_lines(graph):
    opt, train, x, loss = _build(_manager())
    lines = []
    _run([LossScaleHook(optimizer=opt, every_n_steps=3, log_overflows=False,
                        log_fn=lines.append)], train, x, FEEDS)
    assert not [l for l in lines if l.startswith("overflow at")]
    assert len([l for l in lines if l.startswith("loss scale ")]) == 3   # iterations 3, 6, 9


def test_tensorboard_scalars_on_the_iteration_axis_and_the_plot(graph, tmp_path):
    opt, train, x, loss = _build(_manager())
    hook = LossScaleHook(optimizer=opt, every_n_steps=100, loss=loss, output_dir=str(tmp_path),
                         summary_every_n_steps=4, log_fn=lambda _: None)
    _run([hook], train, x, FEEDS)

    plot_script = _load_plot_script()
    series = plot_script.read_run(str(tmp_path), tags=tuple(SUMMARY_TAGS.values()))
    # Written every 4th iteration, and at every overflowed one (3, 4, 7).
    steps, flags = series[SUMMARY_TAGS["overflow"]]
    assert steps == [3, 4, 7, 8]
    assert flags == [1.0, 1.0, 1.0, 0.0]
    steps, scales = series[SUMMARY_TAGS["scale"]]
    expected = _expected_scales()
    assert scales == [expected[s - 1] for s in steps]
    assert series[SUMMARY_TAGS["skipped_steps"]][1] == [1.0, 2.0, 3.0, 3.0]
    assert series[SUMMARY_TAGS["global_step"]][1] == [2.0, 2.0, 4.0, 5.0]
    assert SUMMARY_TAGS["loss"] in series

    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the plot needs it)")
    png = tmp_path / "plot.png"
    assert plot_script.main(["--output", str(png), "run=%s" % tmp_path]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000


def test_plot_script_refuses_a_folder_without_event_files(tmp_path):
    plot_script = _load_plot_script()
    with pytest.raises(SystemExit):
        plot_script.main(["--output", str(tmp_path / "x.png"), str(tmp_path)])


def test_tensors_are_found_by_name_without_the_optimizer(graph):
    opt, train, x, loss = _build(_manager())
    lines = []
    hook = LossScaleHook(every_n_steps=2, loss="loss", log_fn=lines.append)
    _run([hook], train, x, FEEDS[:4])
    assert [h["overflow"] for h in hook.history] == OVERFLOWED[:4]
    assert [h["loss_scale"] for h in hook.history] == _expected_scales()[:4]
    assert hook.skipped_steps == 2


def test_without_overflow_check_the_overflow_is_reported_as_not_available(graph):
    manager = nls.FixedLossScaleManager(loss_scale=128, enable_overflow_check=False)
    opt, train, x, loss = _build(manager)
    lines = []
    hook = LossScaleHook(optimizer=opt, every_n_steps=2, log_fn=lines.append)
    _run([hook], train, x, [[1.0, 1.0]] * 2)
    assert [h["overflow"] for h in hook.history] == [None, None]
    assert [h["loss_scale"] for h in hook.history] == [128.0, 128.0]
    assert "overflow n/a" in lines[0]


def test_a_graph_without_a_loss_scale_is_a_clear_error(graph):
    tf.compat.v1.train.get_or_create_global_step()
    hook = LossScaleHook()
    with pytest.raises(ValueError, match="loss_scale:0"):
        hook.begin()


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1, ValueError), (2.5, TypeError),
                                      (True, TypeError), ("10", TypeError)])
def test_every_n_steps_must_be_a_positive_integer(bad, exc):
    # the package's convention: a value of the wrong type is a TypeError, out of range a ValueError
    with pytest.raises(exc, match="every_n_steps must be an integer >= 1; got %s" % repr(bad)[:3]):
        LossScaleHook(every_n_steps=bad)


def test_overflow_status_clear_hook_clears_the_register_when_an_evaluation_ends(graph):
    from npu_loss_scale.device import (  # pylint: disable=import-outside-toplevel
        register as emulation)
    evaluation = nls.saturate(tf.constant([1e5], tf.float16))      # overflows
    status = emulation.npu_get_float_status_v2()
    hook = nls.OverflowStatusClearHook()
    hook.begin()
    with tf.compat.v1.Session(graph=graph) as sess:
        for _ in range(3):
            sess.run(evaluation)
            hook.before_run(None)                  # nothing per step
        assert sess.run(status)[0] == 1           # sticky while the evaluation runs
        hook.end(sess)                            # one clear when it ends
        assert sess.run(status).tolist() == [0] * 8


def test_hook_logs_grad_norm_and_zero_count_of_megatron_optimizer(graph):
    # d(loss)/dw = x: with x = [3, 0, 4] the norm is 5 and one entry is zero; with an inf in x
    # the step overflows and the optimizer reports NaN and -1 for it.
    w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 1.0, 1.0]),
                                  use_resource=True)
    x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
    loss = tf.reduce_sum(w * x)
    opt = nls.MegatronMixedPrecisionOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1), nls.ConstantGradScaler(8.0),
        log_num_zeros_in_grad=True)
    train = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    lines = []
    hook = LossScaleHook(opt, every_n_steps=1, log_fn=lines.append)
    _run([hook], train, x, [[3.0, 0.0, 4.0], [INF, 0.0, 0.0]])
    assert [h["grad_norm"] for h in hook.history][0] == pytest.approx(5.0)
    assert np.isnan(hook.history[1]["grad_norm"])
    assert [h["num_zeros_in_grad"] for h in hook.history] == [1, -1]
    regular = [line for line in lines if line.startswith("loss scale")]
    assert "grad norm 5 | zeros in grad 1" in regular[0]
    assert "grad norm nan | zeros in grad -1" in regular[1]
