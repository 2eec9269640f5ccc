"""The pytest plugin's assert_resume_matches: a restart from a checkpoint must continue the
loss-scale state as a run straight through does.

The script (tests/scripts/ascend_user_resume.py) is a user's Ascend TF1 session loop with a
Saver; the straight run's reports, written out below, come from its arithmetic (the kernel's
gradient is the loss scale, computed in float16), not from the helper.
"""
import functools
import math
import os

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.pytest_plugin import assert_resume_matches
from tf_versions import tf2_only

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts",
                      "ascend_user_resume.py")


@pytest.fixture
def train(npu_device):
    return npu_device.load_script(SCRIPT).main


def test_the_straight_run_is_what_the_script_arithmetic_gives(train, tmp_path):
    # From 2**17 with float16's largest value 65504: two overflows (halved each time, global_step
    # stays), then 2**15 fits and doubles after 2 good steps, overflows again at 2**16, ...
    reports = train(str(tmp_path), 3)
    got = [(r.loss_scale, r["next_loss_scale"], r.overflowed, r["global_step"]) for r in reports]
    assert got == [(2.0 ** 17, 2.0 ** 16, True, 0), (2.0 ** 16, 2.0 ** 15, True, 0),
                   (2.0 ** 15, 2.0 ** 15, False, 1), (2.0 ** 15, 2.0 ** 16, False, 2),
                   (2.0 ** 16, 2.0 ** 15, True, 2), (2.0 ** 15, 2.0 ** 15, False, 3)]


@pytest.mark.parametrize("resume_at", [1, 2, 3, 5])
def test_a_script_that_saves_every_global_variable_resumes_as_it_ran(train, tmp_path, resume_at):
    assert_resume_matches(train, steps=6, resume_at=resume_at, workdir=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["resumed", "straight"]


def _failure(train, workdir):
    """The AssertionError message of a 6-step run restarted at 3."""
    with pytest.raises(AssertionError) as err:
        assert_resume_matches(train, steps=6, resume_at=3, workdir=workdir)
    return str(err.value)


def test_a_saver_of_the_trainable_variables_fails_at_the_first_step_after_the_restart(
        train, tmp_path):
    # Restarted with global_step 0 and the initial scale: the 7th report (the straight run's
    # step at 2**15, global_step 4) meets 2**17 again.
    message = _failure(functools.partial(train, saver_var_list="trainable"), tmp_path)
    assert "differs from the straight run at step 6, the first after the restart" in message
    assert "loss_scale 32768.0 (straight) vs 131072.0 (resumed)" in message
    assert "global_step 4 (straight) vs 0 (resumed)" in message
    assert "a Saver over every global variable, not only the trainable ones" in message


def test_losing_only_the_growth_counter_shows_as_a_late_growth(train, tmp_path):
    # The loss scale and global_step restored, the manager's good-step counter not: at the first
    # step after the restart the straight run has counted two good steps and doubles its scale;
    # the resumed one has counted one.
    message = _failure(functools.partial(train, saver_var_list="no_counters"), tmp_path)
    assert "at step 6, the first after the restart" in message
    assert ": next_loss_scale 65536.0 (straight) vs 32768.0 (resumed). The" in message


def test_skipped_steps_is_held_only_when_asked(train, tmp_path):
    # NPULossScaleOptimizer's skipped_steps is not in checkpoints unless
    # checkpoint_skipped_steps=True: with ignore=() the restart shows it.
    with pytest.raises(AssertionError, match=r"skipped_steps 3 \(straight\) vs 0 \(resumed\)"):
        assert_resume_matches(train, steps=6, resume_at=3, workdir=tmp_path, ignore=())


def test_a_run_in_which_the_loss_scale_never_moves_is_refused(train, tmp_path):
    with pytest.raises(ValueError, match="the check could not fail"):
        assert_resume_matches(functools.partial(train, init_loss_scale=1.0,
                                                incr_every_n_steps=1000),
                              steps=4, resume_at=2, workdir=tmp_path)


@pytest.mark.npu_device(precision_mode="allow_mix_precision")
def test_an_estimator_resumes_from_its_model_dir_with_the_hooks_history(npu_device, tmp_path):
    """An Estimator's own restart: train(max_steps=until) restores from model_dir; the
    LossScaleHook's history gives the reports. The model is the script's (the gradient is the
    loss scale, in float16): it depends on no data, which the Estimator reads afresh."""
    estimator = getattr(tf.compat.v1, "estimator", None)
    if estimator is None:
        pytest.skip("tensorflow-estimator is not available for this TensorFlow (2.16+)")

    def model_fn(features, labels, mode):  # pylint: disable=unused-argument
        x = tf.constant([[1.0, 1.0]])
        kernel = tf.compat.v1.get_variable("kernel", [2, 1], initializer=tf.ones_initializer())
        loss = tf.reduce_sum(tf.matmul(x, kernel)) + 0.0 * tf.reduce_sum(features)
        manager = nls.ExponentialUpdateLossScaleManager(
            init_loss_scale=2.0 ** 17, incr_every_n_steps=2, decr_every_n_nan_or_inf=1,
            decr_ratio=0.5)
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.001),
                                        manager)
        train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
        return estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn():
        return tf.compat.v1.data.Dataset.from_tensors((tf.ones([1]), tf.zeros([1]))).repeat()

    def train(model_dir, until):
        hook = nls.LossScaleHook(log_overflows=False)
        estimator.Estimator(model_fn, model_dir=model_dir).train(input_fn, max_steps=until,
                                                                 hooks=[hook])
        return hook.history

    assert_resume_matches(train, steps=6, resume_at=3, workdir=tmp_path)


def _megatron_training(model_dir, until, saver_var_list="global"):
    """A TF1 loop with Megatron's DynamicGradScaler(hysteresis=2) inside NPULossScaleOptimizer.
    The loss is multiplied by inf at iterations 1 and 3 of the script's own counter (saved with
    the rest), so its gradient overflows there: at 1 the scale is kept (the hysteresis tracker
    goes 2 -> 1), at 3 it halves (1 -> 0). ``"no_hysteresis"`` saves everything but the
    tracker."""
    with tf.Graph().as_default():
        iteration = tf.compat.v1.get_variable("iteration", initializer=np.int64(0),
                                              trainable=False)
        w = tf.compat.v1.get_variable("w", initializer=[1.0])
        overflow_here = tf.logical_or(tf.equal(iteration, 1), tf.equal(iteration, 3))
        loss = tf.reduce_sum(w * tf.where(overflow_here, np.float32(np.inf), np.float32(1.0)))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                        nls.DynamicGradScaler(8.0, 1.0, 2.0, 0.5, 1000, 2),
                                        backend="emulation")
        train_op = opt.minimize(loss, global_step=global_step)
        with tf.control_dependencies([train_op]):
            step = iteration.assign_add(1)
        kept = [v for v in tf.compat.v1.global_variables()
                if saver_var_list == "global" or "hysteresis" not in v.op.name]
        saver = tf.compat.v1.train.Saver(kept)
        reports = []
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            if tf.train.latest_checkpoint(model_dir):
                saver.restore(sess, tf.train.latest_checkpoint(model_dir))
            while sess.run(global_step) < until:
                reports.append(sess.run([step, opt.step_report])[1])
            os.makedirs(model_dir, exist_ok=True)
            saver.save(sess, os.path.join(model_dir, "model.ckpt"), global_step=global_step)
        return reports


def test_megatrons_hysteresis_survives_the_saver_and_its_loss_shows(tmp_path):
    # iterations 0..5: applied at 8, skipped at 8 (kept), applied at 8 (global_step 2), skipped
    # at 8 (halved), applied at 4, 4
    scales = [(r.loss_scale, r.overflowed) for r in _megatron_training(str(tmp_path / "a"), 4)]
    assert scales == [(8.0, False), (8.0, True), (8.0, False), (8.0, True), (4.0, False),
                      (4.0, False)]
    assert_resume_matches(_megatron_training, steps=4, resume_at=2, workdir=tmp_path / "b")
    # restarted at global_step 2 (after iteration 2) with the tracker back at 2: the overflow at
    # iteration 3 keeps the scale, and iteration 4 runs at 8
    with pytest.raises(AssertionError, match=r"at step 4, the second after the restart: "
                                             r"loss_scale 4.0 \(straight\) vs 8.0 \(resumed\)"):
        assert_resume_matches(functools.partial(_megatron_training,
                                                saver_var_list="no_hysteresis"),
                              steps=4, resume_at=2, workdir=tmp_path / "c")


def _grad_scaler_step(scaler, inner, w):
    with tf.GradientTape() as tape:
        loss = scaler.scale(tf.reduce_sum(4.0 * w))
    scaler.step(inner, list(zip(tape.gradient(loss, [w]), [w])))
    report = scaler.step_report
    scaler.update()
    return report


def _keras_step(opt, w):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(4.0 * w)
        if hasattr(opt, "get_scaled_loss"):      # Keras 2: the user scales and unscales
            loss = opt.get_scaled_loss(loss)
        else:                                    # Keras 3: apply() unscales
            loss = opt.scale_loss(loss)
    grads = tape.gradient(loss, [w])
    if hasattr(opt, "get_unscaled_gradients"):
        grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, [w]))
    return opt.step_report


def _tf2_training(model_dir, until, front_end="grad_scaler", save_scaler=True):
    """A user's TF 2 loop: a GradScaler or the Keras NpuLossScaleOptimizer, a
    tf.train.CheckpointManager, a step counter that counts applied steps. The scaled gradient
    4 * scale overflows float32 above 2**125: from 2**127 the scale backs off twice, then doubles
    after 2 good steps and overflows again."""
    w = tf.Variable([1.0, 1.0])
    step = tf.Variable(0, dtype=tf.int64)
    if front_end == "grad_scaler":
        scaler = nls.GradScaler(init_scale=2.0 ** 127, growth_interval=2, backend="emulation")
        train_step = functools.partial(_grad_scaler_step, scaler, tf.keras.optimizers.SGD(0.001))
    else:
        from npu_loss_scale.keras import NpuLossScaleOptimizer  # pylint: disable=import-outside-toplevel
        scaler = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.001), initial_scale=2.0 ** 127,
                                       dynamic_growth_steps=2, backend="emulation")
        train_step = functools.partial(_keras_step, scaler)
    saved = dict(w=w, step=step, scaler=scaler) if save_scaler else dict(w=w, step=step)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(**saved), model_dir, max_to_keep=1)
    if manager.latest_checkpoint:
        manager.checkpoint.restore(manager.latest_checkpoint)
    reports = []
    while int(step.numpy()) < until:
        reports.append(train_step(w))
        if not reports[-1].overflowed:
            step.assign_add(1)
    manager.save()
    return reports


@tf2_only
@pytest.mark.parametrize("front_end", ["grad_scaler", "keras"])
@pytest.mark.parametrize("resume_at", [1, 2, 3])
def test_a_scaler_saved_in_a_tf_checkpoint_resumes_as_it_ran(tmp_path, front_end, resume_at):
    assert_resume_matches(functools.partial(_tf2_training, front_end=front_end), steps=4,
                          resume_at=resume_at, workdir=tmp_path)


@tf2_only
@pytest.mark.parametrize("front_end, shown", [
    # the GradScaler reports the scale its step used, the Keras optimizer the scale after it
    ("grad_scaler", "scale %r (straight) vs %r (resumed)" % (2.0 ** 126, 2.0 ** 127)),
    ("keras", "next_loss_scale %r (straight) vs %r (resumed)" % (2.0 ** 125, 2.0 ** 126))])
def test_a_tf_checkpoint_without_the_scaler_fails_at_the_restart(tmp_path, front_end, shown):
    # Reports 0-3 reach step 2 (two overflows at 2**127 and 2**126, two good steps at 2**125);
    # the straight run's report 4 overflows at 2**126 after its growth, the restarted scaler is
    # back at 2**127.
    train = functools.partial(_tf2_training, front_end=front_end, save_scaler=False)
    with pytest.raises(AssertionError) as err:
        assert_resume_matches(train, steps=4, resume_at=2, workdir=tmp_path)
    assert "at step 4, the first after the restart: " + shown in str(err.value)


# The rest needs no TensorFlow run: train functions that return reports as dicts.

def _fake(sequence, restart_shift=None):
    """train(model_dir, until) over a fixed list of report dicts, one per global step, saved
    in model_dir as the number of steps done; ``restart_shift`` changes what a restarted run
    reports (a lost state)."""
    def train(model_dir, until):
        os.makedirs(model_dir, exist_ok=True)
        marker = os.path.join(model_dir, "done")
        done = int(open(marker).read()) if os.path.exists(marker) else 0
        restarted = done > 0
        reports = [dict(report) for report in sequence[done:until]]
        if restarted and restart_shift is not None:
            reports = restart_shift(reports)
        with open(marker, "w") as f:
            f.write(str(until))
        return reports
    return train


SEQUENCE = [{"finite": False, "loss_scale": 4.0, "next_loss_scale": 2.0, "global_step": 0},
            {"finite": True, "loss_scale": 2.0, "next_loss_scale": 2.0, "global_step": 1},
            {"finite": True, "loss_scale": 2.0, "next_loss_scale": 4.0, "global_step": 2},
            {"finite": True, "loss_scale": 4.0, "next_loss_scale": 4.0, "global_step": 3}]


def test_a_temporary_workdir_is_made_and_removed(monkeypatch, tmp_path):
    made = []
    real = __import__("tempfile").mkdtemp

    def mkdtemp(**kwargs):
        made.append(real(dir=str(tmp_path), **kwargs))
        return made[-1]
    monkeypatch.setattr("tempfile.mkdtemp", mkdtemp)
    assert_resume_matches(_fake(SEQUENCE), steps=4, resume_at=2)
    assert len(made) == 1 and not os.path.exists(made[0])


def test_nan_scales_compare_equal_and_other_numbers_bit_for_bit(tmp_path):
    nan = [dict(r, loss_scale=math.nan) if i == 3 else r for i, r in enumerate(SEQUENCE)]
    assert_resume_matches(_fake(nan), steps=4, resume_at=2, workdir=tmp_path / "a")

    def nudged(reports):
        reports[0]["loss_scale"] = 2.0000000000000004   # the next double after 2.0
        return reports
    with pytest.raises(AssertionError, match=r"loss_scale 2.0 \(straight\) vs 2.0000000000000004"):
        assert_resume_matches(_fake(SEQUENCE, nudged), steps=4, resume_at=2,
                              workdir=tmp_path / "b")


def test_a_later_difference_is_placed_after_the_restart(tmp_path):
    def counter_lost(reports):
        reports[1]["global_step"] = 0         # the second step after the restart
        return reports
    with pytest.raises(AssertionError, match=r"at step 3, the second after the restart: "
                                             r"global_step 3 \(straight\) vs 0 \(resumed\)\."):
        assert_resume_matches(_fake(SEQUENCE, counter_lost), steps=4, resume_at=2,
                              workdir=tmp_path)


def test_a_difference_before_the_restart_is_called_nondeterminism(tmp_path):
    calls = []

    def train(model_dir, until):
        calls.append(until)
        reports = _fake(SEQUENCE)(model_dir, until)
        if len(calls) == 2:
            reports[0]["loss_scale"] = 8.0
        return reports
    with pytest.raises(AssertionError, match="at step 0, before the restart.*not deterministic.*or depends on until"):
        assert_resume_matches(train, steps=4, resume_at=2, workdir=tmp_path)


def test_a_restart_that_runs_a_different_number_of_steps_fails(tmp_path):
    with pytest.raises(AssertionError, match=r"ran 2 \+ 1 steps to reach until=4, the straight "
                                             r"run 4"):
        assert_resume_matches(_fake(SEQUENCE, lambda reports: reports[:1]), steps=4,
                              resume_at=2, workdir=tmp_path)


def test_a_call_that_runs_no_step_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"until=4\) restarted after until=2 ran no step"):
        assert_resume_matches(_fake(SEQUENCE, lambda reports: []), steps=4, resume_at=2,
                              workdir=tmp_path)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(train=None), TypeError, "train must be a function train\\(model_dir, until\\)"),
    (dict(steps=4.0), TypeError, "steps must be an int; got 4.0"),
    (dict(resume_at=True), TypeError, "resume_at must be an int; got True"),
    (dict(resume_at=4), ValueError, "resume_at must be between 1 and steps - 1 = 3.*got "
                                    "resume_at=4, steps=4"),
    (dict(resume_at=0), ValueError, "resume_at must be between 1 and steps - 1"),
    (dict(ignore=("loss",)), ValueError, "ignore holds 'loss', not a report's number; accepted: "
                                         "loss_scale, next_loss_scale"),
    (dict(ignore=3), TypeError, "ignore must be a list of report keys"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, error, match):
    arguments = dict(train=_fake(SEQUENCE), steps=4, resume_at=2, workdir=tmp_path)
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        assert_resume_matches(**arguments)
    assert not os.path.exists(tmp_path / "straight")   # refused before any run


def test_a_workdir_holding_a_run_is_refused(tmp_path):
    (tmp_path / "straight").mkdir()
    (tmp_path / "straight" / "checkpoint").write_text("model_checkpoint_path: 'x'")
    with pytest.raises(ValueError, match="straight is not empty; give a fresh workdir"):
        assert_resume_matches(_fake(SEQUENCE), steps=4, resume_at=2, workdir=tmp_path)
    assert (tmp_path / "straight" / "checkpoint").read_text() == "model_checkpoint_path: 'x'"


def test_what_train_returns_must_be_reports(tmp_path):
    with pytest.raises(TypeError, match="must return the reports of the steps it ran"):
        assert_resume_matches(lambda model_dir, until: None, steps=4, resume_at=2,
                              workdir=tmp_path / "a")
    with pytest.raises(TypeError, match="assert_resume_matches: step must be .*got 1.0"):
        assert_resume_matches(lambda model_dir, until: [1.0], steps=4, resume_at=2,
                              workdir=tmp_path / "b")
    with pytest.raises(TypeError, match="must return a list of reports, one per step it ran; "
                                        "got one report"):
        assert_resume_matches(lambda model_dir, until: dict(SEQUENCE[0]), steps=4, resume_at=2,
                              workdir=tmp_path / "c")


class _Front:
    """A front end whose step_report is its latest step's, as GradScaler's and Keras's are."""
    step_report = {"finite": True, "loss_scale": 2.0}


def test_the_same_object_returned_for_every_step_is_refused(tmp_path):
    front = _Front()
    with pytest.raises(TypeError, match="returned the same object for several steps.*append "
                                        "obj.step_report after each step"):
        assert_resume_matches(lambda model_dir, until: [front] * until, steps=4, resume_at=2,
                              workdir=tmp_path)


@pytest.mark.parametrize("workdir, error, match", [
    (True, TypeError, "workdir must be a folder's path .* got True"),
    ("file", ValueError, "workdir=.* is a file; give a folder")])
def test_a_workdir_that_is_no_folder_is_refused(tmp_path, workdir, error, match):
    if workdir == "file":
        workdir = tmp_path / "file"
        workdir.write_text("")
    with pytest.raises(error, match=match):
        assert_resume_matches(_fake(SEQUENCE), steps=4, resume_at=2, workdir=workdir)
