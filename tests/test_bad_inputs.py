"""Bad inputs across the public surface: one table, each kind with its observed behaviour asserted.

Every row is ``Case(kind, entry, build, raises, match, behaviour)``:

* ``build(ctx)`` sets the case up and returns the call that triggers it, or a pair
  ``(trigger, verify)``; ``ctx`` has ``mp`` (pytest's monkeypatch) and ``tmp`` (a fresh folder).
* ``raises``/``match``: the exception type the trigger must raise and a regex its message must
  contain (the argument, the value given, what is accepted). ``raises=None``: the input is
  handled correctly, which ``verify`` (or the trigger itself) asserts.
* ``verify()`` runs after the trigger (after the error, for the rows that raise): for a failed
  ``load_state_dict`` or checkpoint restore it asserts that the state from before is intact.
* ``behaviour``: the sentence the documentation table shows.

``docs/bad-inputs.md`` is generated from this table (``python tests/test_bad_inputs.py``
rewrites it) and a test checks that the file matches, so the two cannot drift.
"""
import contextlib
import io
import os
import re
import subprocess
import sys
import types
from collections import namedtuple

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.cli import doctor, emulate
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import precision_lists, saturation
from tf_versions import TF1, TF2_ONLY_REASON

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, os.pardir, "docs", "bad-inputs.md")
HAS_ESTIMATOR = hasattr(tf.compat.v1, "estimator")

Case = namedtuple("Case", "kind entry build raises match behaviour graph needs_estimator")


def case(kind, entry, build, raises=None, match=None, behaviour="", graph=True,
         needs_estimator=False):
    return Case(kind, entry, build, raises, match, behaviour, graph, needs_estimator)


# -- small builders ----------------------------------------------------------------------------
def _sgd():
    return tf.compat.v1.train.GradientDescentOptimizer(0.1)


def _fixed():
    return nls.FixedLossScaleManager(8)


def _dynamic(scale=1024):
    return nls.ExponentialUpdateLossScaleManager(scale, 10)


def _opt(**kwargs):
    return nls.NPULossScaleOptimizer(_sgd(), _fixed(), **kwargs)


def _var(name="v", value=1.0, dtype=tf.float32):
    return tf.compat.v1.get_variable(name, initializer=tf.constant(value, dtype))


def _megatron_dynamic():
    return nls.DynamicGradScaler(2.0 ** 16, 1.0, 2.0, 0.5, 1000, 2)


def _scheduler(optimizer=None, **kwargs):
    args = dict(init_lr=0.0, max_lr=1.0, min_lr=0.0, lr_warmup_steps=0, lr_decay_steps=10,
                lr_decay_style="linear", start_wd=0.0, end_wd=0.0, wd_incr_steps=10,
                wd_incr_style="constant")
    args.update(kwargs)
    return nls.OptimizerParamScheduler(optimizer, **args)


def _run_ops(*fetches):
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        return sess.run(list(fetches))


# -- NPULossScaleOptimizer ---------------------------------------------------------------------
def b_optimizer_nothing_to_agree(ctx):
    v = _var()
    opt = _opt(is_distributed=True)
    return lambda: opt.minimize(v * 2.0)


def b_loss_none(ctx):
    _var()
    return lambda: _opt().minimize(None)


def b_loss_integer(ctx):
    v = _var()
    return lambda: _opt().minimize(tf.cast(v, tf.int32))


def b_var_list_empty(ctx):
    v = _var()
    return lambda: _opt().minimize(v * 2.0, var_list=[])


def b_var_list_string(ctx):
    v = _var()
    return lambda: _opt().minimize(v * 2.0, var_list="v")


def b_var_list_integer(ctx):
    """``tf.global_variables()`` as the var_list (a TF 1.15 habit): the integer global step gets
    no gradient, as in TensorFlow, and the float variable is trained."""
    v = _var()
    n = _var("n", 1, tf.int32)
    step = tf.compat.v1.train.get_or_create_global_step()
    opt = _opt()
    grads_and_vars = opt.compute_gradients(v * tf.cast(n, tf.float32),
                                           var_list=tf.compat.v1.global_variables())
    assert [g is None for g, _ in grads_and_vars] == [False, True, True]
    train = opt.apply_gradients(grads_and_vars, global_step=step)

    def trigger():
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            np.testing.assert_allclose(sess.run([v, n, step]), [1.0 - 0.1, 1, 1])
    return trigger


def b_var_list_only_integer(ctx):
    n = _var("n", 1, tf.int32)
    return lambda: _opt().minimize(tf.cast(n, tf.float32) * 2.0, var_list=[n])


def b_mixed_dtype_gradients(ctx):
    half, single = _var("half", 1.0, tf.float16), _var("single", 1.0)
    opt = _opt()

    def trigger():
        op = opt.apply_gradients([(tf.constant(1.0, tf.float16), half),
                                  (tf.constant(1.0, tf.float32), single)])
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(op)
            values = sess.run([half, single])
        # each variable took its own gradient, in its own dtype: 1 - 0.1 * 1
        assert values[0].dtype == np.float16 and values[0] == np.float16(0.9)
        assert values[1].dtype == np.float32 and values[1] == np.float32(0.9)
    return trigger


def b_non_scalar_loss(ctx):
    v = _var("v", [1.0, 2.0])
    loss = v * tf.constant([3.0, 4.0])

    def trigger():
        grads = _opt().compute_gradients(loss)
        (ours,) = [g for g, _ in grads]
        # the rule of tf.gradients: the gradient of the sum of the loss's elements
        expected = tf.constant([3.0, 4.0])
        got, want = _run_ops(ours, expected)
        np.testing.assert_array_equal(got, want)
    return trigger


def b_status_before_train_op(ctx):
    opt = _opt()
    return lambda: opt.overflow_status_reduce_all


def b_backend_env(ctx):
    ctx.mp.setenv(detection.ENV_VAR, "gpu")
    return _opt


def b_shim_distributed_one_rank(ctx):
    ctx.mp.delenv("RANK_SIZE", raising=False)
    _drop_shim_modules()
    assert emulate.install_shim()

    def trigger():
        try:
            from npu_bridge.estimator.npu.npu_loss_scale_optimizer import (  # pylint: disable=import-outside-toplevel
                NPULossScaleOptimizer)
            v = _var()
            opt = NPULossScaleOptimizer(_sgd(), _fixed(), is_distributed=True)
            op = opt.minimize(v * 2.0)     # builds: no agreement is needed at one rank
            assert (opt.requested_distributed, opt.is_distributed) == (True, False)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(op)
                assert sess.run(v) == pytest.approx(0.8)    # 1 - 0.1 * 2: the step applied
        finally:
            emulate.uninstall_shim()
            _drop_shim_modules()
    return trigger


def _drop_shim_modules():
    for name in list(sys.modules):
        if name.split(".", 1)[0] in emulate.SHIM_PACKAGES:
            del sys.modules[name]


# -- managers -----------------------------------------------------------------------------------
def b_update_flag(value_fn):
    def build(ctx):
        mgr = _dynamic()
        return lambda: mgr.update_loss_scale(value_fn())
    return build


def b_update_flag_one_element(ctx):
    mgr = _dynamic(1024)

    def trigger():
        op = mgr.update_loss_scale(tf.constant([False]))   # one overflow: bad_steps 0 -> 1
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(op)
            assert mgr.state_dict(sess) == {"loss_scale": 1024.0, "good_steps": 0,
                                            "bad_steps": 1}
    return trigger


# -- state_dict / load_state_dict (eager and graph) ----------------------------------------------
def b_load_eager(owner_fn, bad_fn):
    """Loads ``bad_fn(state)`` into a fresh owner in eager mode; verify: state unchanged."""
    def build(ctx):
        owner = owner_fn()
        before = owner.state_dict()

        def verify():
            assert owner.state_dict() == before
        return (lambda: owner.load_state_dict(bad_fn(dict(before)))), verify
    return build


def _with(**changes):
    def make(state):
        state.update(changes)
        return state
    return make


def _without(key):
    def make(state):
        del state[key]
        return state
    return make


def b_load_graph_bad_value(ctx):
    mgr = _dynamic(1024)
    sess = tf.compat.v1.Session()
    sess.run(tf.compat.v1.global_variables_initializer())
    mgr.load_state_dict({"loss_scale": 64.0, "good_steps": 3, "bad_steps": 1}, session=sess)

    def verify():
        try:
            assert mgr.state_dict(sess) == {"loss_scale": 64.0, "good_steps": 3, "bad_steps": 1}
        finally:
            sess.close()
    bad = {"loss_scale": 8.0, "good_steps": 5, "bad_steps": 2 ** 31}
    return (lambda: mgr.load_state_dict(bad, session=sess)), verify


def b_state_dict_no_session(ctx):
    mgr = _dynamic()
    return mgr.state_dict


# -- tf.compat.v1.train.Saver restores -----------------------------------------------------------
def _write_checkpoint(path, variables):
    """A checkpoint holding ``variables`` ({name: value}) written from a graph of its own."""
    with tf.Graph().as_default():
        made = [tf.compat.v1.get_variable(k, initializer=v) for k, v in variables.items()]
        saver = tf.compat.v1.train.Saver(made)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return saver.save(sess, path)


def b_restore(variables=None, corrupt=False, missing_file=False):
    """A graph with a weight and a dynamic manager moved away from their initial values, then
    Saver.restore of a bad checkpoint; verify: every variable is as before."""
    def build(ctx):
        path = os.path.join(str(ctx.tmp), "ckpt")
        if not missing_file:
            path = _write_checkpoint(path, variables)
        if corrupt:
            with open(path + ".data-00000-of-00001", "r+b") as data:
                data.write(b"\xff" * 16)
        w = _var("w", [1.0, 2.0])
        mgr = _dynamic(1024)
        saver = tf.compat.v1.train.Saver()
        sess = tf.compat.v1.Session()
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(w.assign([5.0, 6.0]))
        mgr.load_state_dict({"loss_scale": 64.0, "good_steps": 3, "bad_steps": 1}, session=sess)

        def verify():
            try:
                np.testing.assert_array_equal(sess.run(w), [5.0, 6.0])
                assert mgr.state_dict(sess) == {"loss_scale": 64.0, "good_steps": 3,
                                                "bad_steps": 1}
            finally:
                sess.close()
        return (lambda: saver.restore(sess, path)), verify
    return build


_MANAGER_CKPT = {"good_steps": np.int32(0), "bad_steps": np.int32(0)}


def b_restore_shape_mismatch(ctx):
    """A checkpoint whose ``loss_scale`` has two elements: TensorFlow's Saver restores it without a
    shape check; the manager's state_dict() then names the variable and the shape."""
    path = _write_checkpoint(os.path.join(str(ctx.tmp), "ckpt"),
                             dict(_MANAGER_CKPT, loss_scale=np.float32([8.0, 8.0])))
    mgr = _dynamic(1024)
    saver = tf.compat.v1.train.Saver()
    sess = tf.compat.v1.Session()
    sess.run(tf.compat.v1.global_variables_initializer())
    saver.restore(sess, path)
    return lambda: _closing(sess, lambda: mgr.state_dict(sess))


def b_restore_then_step(make_manager, variables):
    """Saver.restore of a checkpoint holding a state no rule reaches (written from plain
    variables), then one training step: it raises naming the variable; verify: nothing of the
    step was applied."""
    def build(ctx):
        path = _write_checkpoint(os.path.join(str(ctx.tmp), "ckpt"),
                                 dict(variables, w=np.float32([1.0, 2.0])))
        w = _var("w", [0.0, 0.0])
        opt = nls.NPULossScaleOptimizer(_sgd(), make_manager())
        train = opt.minimize(tf.reduce_sum(w * w))
        sess = tf.compat.v1.Session()
        sess.run(tf.compat.v1.global_variables_initializer())
        tf.compat.v1.train.Saver().restore(sess, path)

        def verify():
            try:
                np.testing.assert_array_equal(sess.run(w), [1.0, 2.0])
            finally:
                sess.close()
        return (lambda: sess.run(train)), verify
    return build


_MEGATRON_CKPT = {"scale": np.float32(1024.0), "growth_tracker": np.int32(0),
                  "hysteresis_tracker": np.int32(2), "min_scale_overflow_steps": np.int32(0)}


def _closing(sess, fn):
    try:
        return fn()
    finally:
        sess.close()


# -- Megatron -----------------------------------------------------------------------------------
def b_megatron_update_str(ctx):
    scaler = _megatron_dynamic()
    return lambda: scaler.update("x")


# -- schedules ----------------------------------------------------------------------------------
def b_scheduler_load(ctx):
    sched = _scheduler()
    sched.step(3)
    before = sched.state_dict()

    def verify():
        assert sched.state_dict() == before
    bad = dict(before, num_steps=-1, max_lr=2.0)
    return (lambda: sched.load_state_dict(bad)), verify


# -- GradScaler ---------------------------------------------------------------------------------
def b_grad_scaler_load(bad_fn):
    def build(ctx):
        scaler = nls.GradScaler(init_scale=4.0)
        before = scaler.state_dict()

        def verify():
            assert scaler.state_dict() == before
        return (lambda: scaler.load_state_dict(bad_fn(dict(before)))), verify
    return build


def b_grad_scaler_step_no_optimizer(ctx):
    scaler = nls.GradScaler()
    v = tf.Variable(1.0)
    return lambda: scaler.step(object(), [(tf.constant(1.0), v)])


def b_grad_scaler_restored_nan_scale(ctx):
    """A tf.train.Checkpoint whose scale is NaN, restored into a scaler; the next step is
    refused."""
    source = nls.GradScaler()
    source._scale.assign(float("nan"))  # pylint: disable=protected-access
    path = tf.train.Checkpoint(scaler=source).save(os.path.join(str(ctx.tmp), "ckpt"))
    scaler = nls.GradScaler()
    tf.train.Checkpoint(scaler=scaler).restore(path)
    w = tf.Variable([1.0])
    return lambda: scaler.step(tf.keras.optimizers.SGD(0.1), [(tf.constant([2.0]), w)])


def b_checkpoint_wrong_shape(make, attributes):
    """A tf.train.Checkpoint of a plain tf.Module whose variables carry ``make()``'s checkpoint
    names (``attributes``: name -> value), one of them wrong-shaped, restored into ``make()``;
    verify: none of its state changed."""
    def build(ctx):
        plain = tf.Module()
        for name, value in attributes.items():
            setattr(plain, name, tf.Variable(value))
        path = tf.train.Checkpoint(obj=plain).save(os.path.join(str(ctx.tmp), "ckpt"))
        owner = make()
        before = owner.state_dict()

        def verify():
            assert owner.state_dict() == before
        return (lambda: tf.train.Checkpoint(obj=owner).restore(path)), verify
    return build


def b_grad_scaler_ignored_unscale_result(ctx):
    scaler = nls.GradScaler(init_scale=8.0)
    opt = tf.keras.optimizers.SGD(0.1)
    w = tf.Variable([1.0], name="w")
    grads = [tf.constant([16.0])]
    scaler.unscale_(opt, grads)                 # the result ignored, as torch's in-place call
    return lambda: scaler.step(opt, [(grads[0], w)])


# -- Keras --------------------------------------------------------------------------------------
def b_keras(**kwargs):
    def build(ctx):
        from npu_loss_scale import keras as nls_keras  # pylint: disable=import-outside-toplevel
        inner = kwargs.pop("inner", None)
        return lambda: nls_keras.NpuLossScaleOptimizer(
            inner if inner is not None else tf.keras.optimizers.SGD(), **kwargs)
    return build


KERAS3 = hasattr(tf.keras.optimizers, "LossScaleOptimizer")


def _keras_trained():
    """A weight and a Keras NpuLossScaleOptimizer (SGD with momentum) after one applied step."""
    from npu_loss_scale import keras as nls_keras  # pylint: disable=import-outside-toplevel
    var = tf.Variable([1.0, 2.0])
    opt = nls_keras.NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5, momentum=0.5),
                                          initial_scale=8.0)
    _keras_step(opt, var)
    return var, opt


def _keras_step(opt, var):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(var)
        scaled = opt.scale_loss(loss) if KERAS3 else opt.get_scaled_loss(loss)
    grads = tape.gradient(scaled, [var])
    if not KERAS3:
        grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(list(zip(grads, [var])))


def _keras_state_variables(opt):
    if KERAS3:
        return [opt.dynamic_scale, opt.step_counter]
    return [opt._loss_scale.current_loss_scale, opt.dynamic_counter]  # pylint: disable=protected-access


def b_keras_checkpoint(which, value):
    """A checkpoint whose loss scale (which=0) or growth counter (which=1) holds ``value``,
    restored; the next step is the trigger; verify: weights and optimizer state as restored."""
    def build(ctx):
        var, opt = _keras_trained()
        bad = _keras_state_variables(opt)[which]
        bad.assign(tf.cast(value, bad.dtype))
        path = tf.train.Checkpoint(var=var, opt=opt).save(os.path.join(str(ctx.tmp), "ckpt"))
        var, opt = _keras_trained()
        tf.train.Checkpoint(var=var, opt=opt).restore(path)
        own = opt.variables() if callable(opt.variables) else opt.variables  # 2.6: a method
        watched = [var] + _keras_state_variables(opt) + list(own)
        before = [v.numpy().copy() for v in watched]

        def verify():
            for old, v in zip(before, watched):
                np.testing.assert_array_equal(old, v.numpy())
        return (lambda: _keras_step(opt, var)), verify
    return build


def _keras2_loss_scale_key(opt, ctx):
    """The name a Keras 2 LossScaleOptimizer's checkpoint gives its loss-scale state."""
    path = tf.train.Checkpoint(opt=opt).save(os.path.join(str(ctx.tmp), "names"))
    return next(name.split("/")[1] for name, _ in tf.train.list_variables(path)
                if name.endswith("/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE"))


def b_keras_checkpoint_scale_shape(ctx):
    """A checkpoint whose loss scale has two elements (and a valid counter of 5):
    tf.train.Checkpoint refuses it; verify: neither the scale nor the counter changed."""
    var, opt = _keras_trained()
    scale, counter = tf.Variable([8.0, 8.0]), tf.Variable(5, dtype=tf.int64)
    if KERAS3:
        holder = tf.train.Checkpoint(dynamic_scale=scale, step_counter=counter)
    else:  # Keras 2 saves its loss-scale state as "_loss_scale" (2.6: "loss_scale")
        state = tf.train.Checkpoint(current_loss_scale=scale, good_steps=counter)
        holder = tf.train.Checkpoint(**{_keras2_loss_scale_key(opt, ctx): state})
    path = tf.train.Checkpoint(opt=holder).save(os.path.join(str(ctx.tmp), "ckpt"))
    watched = _keras_state_variables(opt)
    before = [v.numpy().copy() for v in watched]

    def verify():
        for old, v in zip(before, watched):
            np.testing.assert_array_equal(old, v.numpy())
    return (lambda: tf.train.Checkpoint(var=var, opt=opt).restore(path)), verify


# -- emulation, flags ---------------------------------------------------------------------------
def b_sat_mode_env(ctx):
    ctx.mp.setenv(emulation.MODE_ENV_VAR, "2")
    ctx.mp.setattr(emulation, "_mode", None)
    return nls.get_device_sat_mode


def b_mixlist_bad_key(ctx):
    return lambda: precision_lists.set_modify_mixlist({"blacklist": {"to-add": ["MatMulV2"]}})


def b_mixlist_env_missing(ctx):
    ctx.mp.setenv(precision_lists.ENV_VAR, "no_such_mixlist_for_npu_loss_scale.json")
    return precision_lists.default_modify_mixlist


def b_rank_size_env(ctx):
    ctx.mp.setenv("RANK_SIZE", "two")
    from npu_loss_scale.cli import report_files  # pylint: disable=import-outside-toplevel

    def trigger():
        with report_files.entry_point_tools(overflow_report="overflow.jsonl"):
            pass
    return trigger


def b_saturate_every_op(dtypes):
    def build(ctx):
        def trigger():
            with saturation.saturate_every_op(dtypes):
                pass
        return trigger
    return build


# -- npu_bridge shim ----------------------------------------------------------------------------
def b_run_config(**kwargs):
    def build(ctx):
        _drop_shim_modules()
        assert emulate.install_shim()

        def trigger():
            try:
                from npu_bridge.estimator.npu.npu_config import (  # pylint: disable=import-outside-toplevel
                    NPURunConfig)
                return NPURunConfig(**kwargs)
            finally:
                emulate.uninstall_shim()
                _drop_shim_modules()
        return trigger
    return build


# -- python -m npu_loss_scale.emulate ----------------------------------------------------------
def b_cli(argv, code=2, stderr=None):
    """``emulate.main(argv)`` in this process: the exit status (returned or SystemExit) must be
    ``code`` and stderr must match ``stderr``; nothing of the process is left changed."""
    def build(ctx):
        def trigger():
            saved_argv, saved_path = list(sys.argv), list(sys.path)
            saved_mode = os.environ.get(emulation.MODE_ENV_VAR)
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err):
                    try:
                        status = emulate.main(list(argv))
                    except SystemExit as exit_:
                        status = exit_.code
            finally:
                sys.argv[:], sys.path[:] = saved_argv, saved_path
            assert status == code, (status, err.getvalue())
            assert re.search(stderr, err.getvalue()), err.getvalue()
            assert os.environ.get(emulation.MODE_ENV_VAR) == saved_mode
        return trigger
    build.stderr_match = stderr
    return build


def b_doctor(argv, stderr):
    """``npu-loss-scale doctor`` (``doctor.main(argv)``) in this process, refused before any
    script starts: exit status 2 and stderr matching ``stderr``. ``{tmp}`` in ``argv`` is the
    case's temporary folder, ``{file}`` a file made there (a report folder that cannot be made);
    nothing is written into the folder."""
    def build(ctx):
        def trigger():
            blocker = os.path.join(str(ctx.tmp), "a_file")
            with open(blocker, "w", encoding="utf-8") as out:
                out.write("not a folder")
            words = [a.replace("{file}", blocker).replace("{tmp}", str(ctx.tmp)) for a in argv]
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                try:
                    status = doctor.main(words)
                except SystemExit as exit_:
                    status = exit_.code
            assert status == 2, (status, err.getvalue())
            assert re.search(stderr, err.getvalue()), err.getvalue()
            assert sorted(os.listdir(str(ctx.tmp))) == ["a_file"]
        return trigger
    build.stderr_match = stderr
    return build


def b_cli_missing_module(ctx):
    def trigger():
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        env.pop(detection.ENV_VAR, None)
        proc = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "-m",
                               "no_such_module_for_npu_loss_scale"], env=env, cwd=str(ctx.tmp),
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
        assert re.search(b_cli_missing_module.stderr_match, proc.stderr), \
            proc.stderr[-2000:]
    return trigger


b_cli_missing_module.stderr_match = r"No module named '?no_such_module_for_npu_loss_scale"


# -- the table ----------------------------------------------------------------------------------
OPT = "NPULossScaleOptimizer(...)"
FIXED = "FixedLossScaleManager(...)"
EXP = "ExponentialUpdateLossScaleManager(...)"
DYN = "DynamicGradScaler(...)"
MMP = "MegatronMixedPrecisionOptimizer(...)"
OPS = "OptimizerParamScheduler(...)"
GS = "GradScaler(...)"
KERAS = "keras.NpuLossScaleOptimizer(...)"
KERAS_RESTORE = "tf.train.Checkpoint.restore, then a keras.NpuLossScaleOptimizer step"
CLI = "python -m npu_loss_scale.emulate"
DOCTOR = "npu-loss-scale doctor"
NAN, INF = float("nan"), float("inf")

CASES = [
    # NPULossScaleOptimizer
    case("optimizer-not-an-optimizer", OPT, lambda c: lambda: nls.NPULossScaleOptimizer(
        "adam", _fixed()), TypeError, r"opt must be a tf\.compat\.v1\.train\.Optimizer .*got 'adam'"),
    case("keras-optimizer-given-as-opt", OPT, lambda c: lambda: nls.NPULossScaleOptimizer(
        tf.keras.optimizers.SGD(), _fixed()), TypeError,
         r"opt must be a tf\.compat\.v1\.train\.Optimizer.*For Keras optimizers use a Keras "
         r"loss-scale optimizer"),
    case("manager-not-a-manager", OPT, lambda c: lambda: nls.NPULossScaleOptimizer(
        _sgd(), 1024.0), TypeError, r"loss_scale_manager must be a LossScaleManager .*or an object "
                                    r"with get_loss_scale\(\) and update_loss_scale.*got 1024\.0"),
    case("is-distributed-not-bool", OPT, lambda c: lambda: _opt(is_distributed="yes"), TypeError,
         r"is_distributed must be True or False; got 'yes'"),
    case("is-distributed-nothing-to-agree-through", OPT + ".minimize", b_optimizer_nothing_to_agree,
         RuntimeError, r"is_distributed=True, but there is nothing to agree on the overflow "
                       r"status through.*agreement="),
    case("accumulation-steps-zero", OPT, lambda c: lambda: _opt(accumulation_steps=0), ValueError,
         r"accumulation_steps must be an integer >= 1; got 0"),
    case("accumulation-steps-fraction", OPT, lambda c: lambda: _opt(accumulation_steps=2.5),
         TypeError, r"accumulation_steps must be an integer >= 1; got 2\.5"),
    case("backend-unknown", OPT, lambda c: lambda: _opt(backend="gpu"), ValueError,
         r"backend must be one of 'npu', 'emulation', 'inf_nan'; got 'gpu'"),
    case("backend-env-variable-unknown", OPT + " with NPU_LOSS_SCALE_BACKEND=gpu", b_backend_env,
         ValueError, r"environment variable NPU_LOSS_SCALE_BACKEND must be one of npu, emulation, "
                     r"inf_nan; got 'gpu'"),
    case("agreement-unknown", OPT, lambda c: lambda: _opt(agreement="mpi"), ValueError,
         r"agreement must be one of 'strategy', 'hccl', 'horovod', 'collective'; got 'mpi'"),
    case("name-empty", OPT, lambda c: lambda: _opt(name=""), TypeError,
         r"name must be a non-empty string or None; got ''"),
    case("loss-none", OPT + ".minimize", b_loss_none, TypeError,
         r"loss must be a floating-point tensor \(float16, bfloat16, float32 or float64\).*got "
         r"None"),
    case("loss-integer-tensor", OPT + ".minimize", b_loss_integer, TypeError,
         r"loss must be a floating-point tensor .*of dtype int32"),
    case("var-list-empty", OPT + ".minimize", b_var_list_empty, ValueError,
         r"var_list must hold at least one variable to optimize, or be None .*got \[\]"),
    case("var-list-a-string", OPT + ".minimize", b_var_list_string, TypeError,
         r"var_list must be a list of variables, or None \(the trainable variables\); got 'v' "
         r"\(type str\)"),
    case("var-list-with-an-integer-variable", OPT + ".compute_gradients", b_var_list_integer,
         behaviour="handled: the integer variable (a global step in tf.global_variables()) gets "
                   "no gradient, as in TensorFlow, and the floating-point one is trained"),
    case("var-list-only-integer-variables", OPT + ".minimize", b_var_list_only_integer, TypeError,
         r"var_list must hold at least one floating-point variable .*got none, var_list\[0\] = "
         r"'n:0' of dtype int32"),
    case("mixed-dtype-gradients", OPT + ".apply_gradients", b_mixed_dtype_gradients,
         behaviour="handled: a float16 and a float32 gradient are each applied to their own "
                   "variable in their own dtype"),
    case("non-scalar-loss", OPT + ".compute_gradients", b_non_scalar_loss,
         behaviour="handled: the gradients are those of the sum of the loss's elements "
                   "(tf.gradients' rule), unscaled"),
    case("status-read-before-train-op", OPT + ".overflow_status_reduce_all",
         b_status_before_train_op, RuntimeError,
         r"overflow_status_reduce_all exists once the train op is built: call minimize\(\)"),
    case("shim-is-distributed-at-one-rank", "npu_bridge NPULossScaleOptimizer(is_distributed=True)",
         b_shim_distributed_one_rank,
         behaviour="handled: at one rank the device's all-reduce is the identity, so the shim "
                   "uses the status as is (requested_distributed=True, is_distributed=False)"),
    # loss-scale managers
    case("fixed-scale-below-one", FIXED, lambda c: lambda: nls.FixedLossScaleManager(0.5),
         ValueError, r"loss_scale must be >= 1\.0 and <= 3\.40\d*e\+38; got 0\.5"),
    case("fixed-scale-nan", FIXED, lambda c: lambda: nls.FixedLossScaleManager(NAN), ValueError,
         r"loss_scale must be a finite real number >= 1\.0.*; got nan"),
    case("fixed-scale-inf", FIXED, lambda c: lambda: nls.FixedLossScaleManager(INF), ValueError,
         r"loss_scale must be a finite real number >= 1\.0.*; got inf"),
    case("fixed-scale-string", FIXED, lambda c: lambda: nls.FixedLossScaleManager("1024"),
         TypeError, r"loss_scale must be a real number >= 1\.0.*got '1024' \(type str\)"),
    case("fixed-overflow-check-not-bool", FIXED, lambda c: lambda: nls.FixedLossScaleManager(
        8, enable_overflow_check="no"), TypeError,
         r"enable_overflow_check must be True or False; got 'no'"),
    case("exponential-init-scale-inf", EXP, lambda c: lambda: nls.ExponentialUpdateLossScaleManager(
        INF, 10), ValueError, r"init_loss_scale must be a finite real number >= 1\.0.*; got inf"),
    case("exponential-incr-every-zero", EXP, lambda c: lambda: nls.ExponentialUpdateLossScaleManager(
        1024, 0), ValueError, r"incr_every_n_steps must be an integer >= 1; got 0"),
    case("exponential-incr-every-nan", EXP, lambda c: lambda: nls.ExponentialUpdateLossScaleManager(
        1024, NAN), TypeError, r"incr_every_n_steps must be an integer >= 1; got nan"),
    case("exponential-decr-every-bool", EXP, lambda c: lambda: nls.ExponentialUpdateLossScaleManager(
        1024, 10, decr_every_n_nan_or_inf=True), TypeError,
         r"decr_every_n_nan_or_inf must be an integer >= 1; got True \(type bool\)"),
    case("exponential-incr-ratio-one", EXP, lambda c: lambda: nls.ExponentialUpdateLossScaleManager(
        1024, 10, incr_ratio=1), ValueError, r"incr_ratio must be > 1; got 1\.0"),
    case("exponential-decr-ratio-above-one", EXP,
         lambda c: lambda: nls.ExponentialUpdateLossScaleManager(1024, 10, decr_ratio=1.5),
         ValueError, r"decr_ratio must be in the open interval \(0, 1\); got 1\.5"),
    case("update-flag-float", "LossScaleManager.update_loss_scale",
         b_update_flag(lambda: tf.constant(1.0)), TypeError,
         r"finite_grads must be a Python bool or a scalar bool tensor .*got dtype float32"),
    case("update-flag-none", "LossScaleManager.update_loss_scale", b_update_flag(lambda: None),
         TypeError, r"finite_grads must be a Python bool or a scalar bool tensor .*got None"),
    case("update-flag-vector", "LossScaleManager.update_loss_scale",
         b_update_flag(lambda: tf.constant([True, False])), ValueError,
         r"finite_grads must be a scalar bool tensor \(or one with a single element\); got "
         r"shape \(2,\)"),
    case("update-flag-one-element", "LossScaleManager.update_loss_scale", b_update_flag_one_element,
         behaviour="handled: a bool tensor of shape [1] counts as its one element"),
    # state_dict / load_state_dict
    case("load-state-dict-not-a-dict", EXP + ".load_state_dict",
         b_load_eager(_dynamic, lambda s: list(s.items())), TypeError,
         r"ExponentialUpdateLossScaleManager\.load_state_dict\(\) takes a dict; got \[",
         graph=False),
    case("load-state-dict-missing-key", EXP + ".load_state_dict",
         b_load_eager(_dynamic, _without("bad_steps")), KeyError,
         r"expected the keys \['bad_steps', 'good_steps', 'loss_scale'\]; missing \['bad_steps'\]",
         graph=False),
    case("load-state-dict-unknown-key", EXP + ".load_state_dict",
         b_load_eager(_dynamic, _with(scale=2.0)), KeyError, r"missing \[\], unknown \['scale'\]",
         graph=False),
    case("load-state-dict-nan-scale", EXP + ".load_state_dict",
         b_load_eager(_dynamic, _with(loss_scale=NAN, good_steps=5)), ValueError,
         r"state_dict\['loss_scale'\] must be a finite number >= 1 and <= 3\.4028235e38 "
         r"\(float32 max\); got nan", graph=False),
    case("load-state-dict-negative-counter", EXP + ".load_state_dict",
         b_load_eager(_dynamic, _with(loss_scale=8.0, bad_steps=-1)), ValueError,
         r"state_dict\['bad_steps'\] must be an integer >= 0 and <= 2147483647 \(int32\); got -1",
         graph=False),
    case("load-state-dict-string-value", EXP + ".load_state_dict",
         b_load_eager(_dynamic, _with(loss_scale="8")), TypeError,
         r"state_dict\['loss_scale'\] must be .*got '8' \(type str\)", graph=False),
    case("load-state-dict-int32-overflow-graph", EXP + ".load_state_dict(session=...)",
         b_load_graph_bad_value, ValueError,
         r"state_dict\['bad_steps'\] must be an integer >= 0 and <= 2147483647 \(int32\); got "
         r"2147483648"),
    case("state-dict-graph-without-session", EXP + ".state_dict", b_state_dict_no_session,
         RuntimeError, r"state_dict\(\) in graph mode needs a session .*pass session="),
    case("fixed-load-dynamic-state", FIXED + ".load_state_dict",
         b_load_eager(_fixed, lambda s: {"loss_scale": 8.0, "good_steps": 0, "bad_steps": 0}),
         ValueError, r"state_dict of a FixedLossScaleManager must be \{\} .*got keys",
         graph=False),
    case("megatron-load-negative-tracker", DYN + ".load_state_dict",
         b_load_eager(_megatron_dynamic, _with(scale=2.0, growth_tracker=-3)), ValueError,
         r"DynamicGradScaler\.load_state_dict\(\): state_dict\['growth_tracker'\] must be an "
         r"integer >= 0 .*got -3", graph=False),
    # checkpoints
    case("checkpoint-missing-variables", "tf.compat.v1.train.Saver.restore",
         b_restore({"w": np.float32([1.0, 2.0])}), tf.errors.NotFoundError,
         r"Key (loss_scale|good_steps|bad_steps) not found in checkpoint"),
    case("checkpoint-dtype-mismatch", "tf.compat.v1.train.Saver.restore",
         b_restore(dict(_MANAGER_CKPT, w=np.float32([1.0, 2.0]),
                        loss_scale=np.int32(8))),
         tf.errors.InvalidArgumentError, r"(?s)mismatch between the current graph and the graph "
                                          r"from the checkpoint.*loss_scale"),
    # TensorFlow's own message; TF 1.15's names no file
    case("checkpoint-corrupt", "tf.compat.v1.train.Saver.restore",
         b_restore(dict(_MANAGER_CKPT, w=np.float32([1.0, 2.0]),
                        loss_scale=np.float32(8.0)), corrupt=True),
         tf.errors.DataLossError, r"(TensorBundle at .* )?Checksum does not match"),
    case("checkpoint-path-missing", "tf.compat.v1.train.Saver.restore",
         b_restore(missing_file=True), ValueError, r"The passed save_path is not a valid "
                                                   r"checkpoint"),
    case("checkpoint-shape-mismatch", "Saver.restore, then " + EXP + ".state_dict",
         b_restore_shape_mismatch, ValueError,
         r"state_dict\(\): variable 'loss_scale' holds shape \(2,\) where a scalar is expected"),
    case("checkpoint-nan-scale-first-step", "Saver.restore, then the train op",
         b_restore_then_step(_dynamic, dict(_MANAGER_CKPT, loss_scale=np.float32(NAN))),
         tf.errors.InvalidArgumentError,
         r"ExponentialUpdateLossScaleManager: its variable loss_scale holds\] \[nan\] .*"
         r"accepted: a scalar, a finite number >= 1 and <= 3\.4028235e38"),
    case("checkpoint-negative-counter-first-step", "Saver.restore, then the train op",
         b_restore_then_step(_dynamic, dict(_MANAGER_CKPT, loss_scale=np.float32(8.0),
                                            bad_steps=np.int32(-2))),
         tf.errors.InvalidArgumentError,
         r"its variable bad_steps holds\] \[-2\] .*accepted: a scalar, an integer >= 0"),
    case("checkpoint-shape-mismatch-first-step", "Saver.restore, then the train op",
         b_restore_then_step(_dynamic, dict(_MANAGER_CKPT, loss_scale=np.float32([8.0, 8.0]))),
         tf.errors.InvalidArgumentError,
         r"its variable loss_scale holds\] \[8 8\] .*accepted: a scalar, "),
    case("checkpoint-object-wrong-shape", "tf.train.Checkpoint.restore (" + EXP + ")",
         b_checkpoint_wrong_shape(lambda: _dynamic(1024), {
             "bad_steps": np.int32(1), "good_steps": np.int32(5),
             "loss_scale": np.float32([8.0, 8.0])}), ValueError,
         r"ExponentialUpdateLossScaleManager: the checkpoint being restored holds shape \(2,\) "
         r"for loss_scale \(\[8\. 8\.\]\); accepted: shape \(\) \(float32\)", graph=False),
    # Megatron
    case("megatron-checkpoint-below-min-scale", "Saver.restore, then the train op",
         b_restore_then_step(_megatron_dynamic, dict(_MEGATRON_CKPT, scale=np.float32(0.5))),
         tf.errors.InvalidArgumentError,
         r"DynamicGradScaler: its variable scale holds\] \[0\.5\] .*accepted: a scalar, a "
         r"finite number >= min_scale \(1\.0\)"),
    case("megatron-load-below-min-scale", DYN + ".load_state_dict",
         lambda c: lambda: nls.DynamicGradScaler(
             1024, 4, 2, 0.5, 1000, 2).load_state_dict(
                 {"scale": 2.0, "growth_tracker": 0, "hysteresis_tracker": 2}),
         ValueError, r"state_dict\['scale'\] must be a finite number >= min_scale \(4\.0\) .*"
                     r"got 2\.0", graph=False),
    case("megatron-backoff-above-one", DYN, lambda c: lambda: nls.DynamicGradScaler(
        2.0 ** 16, 1, 2, 1.5, 1000, 2), ValueError,
         r"backoff_factor must be in the open interval \(0, 1\); got 1\.5"),
    case("megatron-min-scale-above-initial", DYN, lambda c: lambda: nls.DynamicGradScaler(
        2.0 ** 16, 2.0 ** 17, 2, 0.5, 1000, 2), ValueError,
         r"min_scale must be > 0 and <= initial_scale \(65536\.0\); got 131072\.0"),
    case("megatron-hysteresis-zero", DYN, lambda c: lambda: nls.DynamicGradScaler(
        2.0 ** 16, 1, 2, 0.5, 1000, 0), ValueError, r"hysteresis must be an integer >= 1; got 0"),
    case("megatron-constant-negative", "ConstantGradScaler(...)",
         lambda c: lambda: nls.ConstantGradScaler(-1), ValueError,
         r"initial_scale must be > 0 and <= 3\.4028235e38 \(float32 max\); got -1\.0"),
    case("megatron-found-inf-string", DYN + ".update", b_megatron_update_str, TypeError,
         r"found_inf .* is a Python bool, a Python int 0 or 1.*got 'x' \(type str\)",
         graph=False),
    case("megatron-fp16-and-bf16", MMP, lambda c: lambda: nls.MegatronMixedPrecisionOptimizer(
        _sgd(), nls.ConstantGradScaler(1.0), fp16=True, bf16=True), ValueError,
         r"fp16 and bf16 cannot both be True"),
    case("megatron-fp16-without-scaler", MMP, lambda c: lambda: nls.MegatronMixedPrecisionOptimizer(
        _sgd(), None, fp16=True), ValueError,
         r"grad_scaler=None is only accepted with bf16 .*fp16 needs a DynamicGradScaler"),
    case("megatron-clip-grad-nan", MMP, lambda c: lambda: nls.MegatronMixedPrecisionOptimizer(
        _sgd(), nls.ConstantGradScaler(1.0), clip_grad=NAN), ValueError,
         r"clip_grad must be a finite real number >= 0 \(0 turns clipping off\); got nan"),
    case("megatron-optimizer-not-an-optimizer", MMP,
         lambda c: lambda: nls.MegatronMixedPrecisionOptimizer("sgd", nls.ConstantGradScaler(1.0)),
         TypeError, r"optimizer must be a tf\.compat\.v1\.train\.Optimizer .*got 'sgd'"),
    # schedules
    case("scheduler-unknown-decay-style", OPS, lambda c: lambda: _scheduler(
        lr_decay_style="bogus"), ValueError,
         r"lr_decay_style must be one of 'constant', 'linear', 'cosine', 'inverse-square-root', "
         r"'WSD'; got 'bogus'", graph=False),
    case("scheduler-min-lr-above-max", OPS, lambda c: lambda: _scheduler(min_lr=2.0), ValueError,
         r"min_lr must be <= max_lr \(1\.0\); got 2\.0", graph=False),
    case("scheduler-optimizer-wrong-type", OPS, lambda c: lambda: _scheduler(optimizer=3),
         TypeError, r"optimizer must be a ParamGroupOptimizer, an object with a param_groups list "
                    r"of dicts, or None; got 3", graph=False),
    case("scheduler-load-negative-steps", OPS + ".load_state_dict", b_scheduler_load, ValueError,
         r"state_dict\['num_steps'\] must be an integer >= 0; got -1", graph=False),
    case("param-groups-fn-not-callable", "ParamGroupOptimizer(...)",
         lambda c: lambda: nls.ParamGroupOptimizer(3), TypeError,
         r"optimizer_fn must be a callable .*got 3", graph=False),
    case("param-groups-override-malformed", "ParamGroupOptimizer(...)",
         lambda c: lambda: nls.ParamGroupOptimizer(lambda lr, group: _sgd(), overrides=[("x*",)]),
         TypeError, r"overrides\[0\] must be a \(key, ParamGroupOverride\) pair; got \('x\*',\)",
         graph=False),
    case("param-groups-overrides-conflict", "combine_param_group_overrides",
         lambda c: lambda: nls.combine_param_group_overrides([{"wd_mult": 1.0},
                                                              {"wd_mult": 2.0}]),
         ValueError, r"conflicting param group overrides for 'wd_mult': 1\.0 and 2\.0",
         graph=False),
    case("warmup-decay-max-lr-nan", "WarmupDecaySchedule(...)",
         lambda c: lambda: nls.WarmupDecaySchedule(max_lr=NAN), TypeError,
         r"max_lr must be a finite real number >= 0\.0; got nan", graph=False),
    # GradScaler / OptimizerThread
    case("grad-scaler-init-scale-nan", GS, lambda c: lambda: nls.GradScaler(init_scale=NAN),
         ValueError, r"init_scale must be a finite real number >= 1\.1754944e-38 \(float32's "
         r"smallest normal number\) and <= 3\.4028235e38 .*got nan", graph=False),
    case("grad-scaler-init-scale-subnormal", GS,
         lambda c: lambda: nls.GradScaler(init_scale=2.0 ** -127), ValueError,
         r"init_scale must be >= 1\.1754944e-38 \(float32's smallest normal number\) and "
         r"<= 3\.4028235e38 \(float32's largest\); got 5\.87\d*e-39", graph=False),
    case("grad-scaler-restored-nan-scale", GS + ".step",
         b_grad_scaler_restored_nan_scale, tf.errors.InvalidArgumentError,
         r"(?s)GradScaler: variable scale \(scale:0\) holds.*nan.*accepted: a float32 >= "
         r"1\.1754944e-38", graph=False),
    case("grad-scaler-checkpoint-wrong-shape", "tf.train.Checkpoint.restore (GradScaler)",
         b_checkpoint_wrong_shape(nls.GradScaler, {
             "_growth_factor": 3.0, "_backoff_factor": 0.25, "_growth_interval": 7,
             "_growth_tracker": 5, "_scale": np.float32([8.0, 8.0])}), ValueError,
         r"GradScaler: the checkpoint being restored holds shape \(2,\) for scale "
         r"\(\[8\. 8\.\]\); accepted: shape \(\) \(float32\)\. Nothing was restored",
         graph=False),
    case("grad-scaler-step-after-ignored-unscale", GS + ".step",
         b_grad_scaler_ignored_unscale_result, RuntimeError,
         r"gradient given for 'w:0' was computed from the scaled gradients passed to unscale_",
         graph=False),
    case("grad-scaler-growth-below-one", GS, lambda c: lambda: nls.GradScaler(growth_factor=0.5),
         ValueError, r"growth_factor must be > 1; got 0\.5", graph=False),
    case("grad-scaler-interval-zero", GS, lambda c: lambda: nls.GradScaler(growth_interval=0),
         ValueError, r"growth_interval must be an integer >= 1; got 0", graph=False),
    case("grad-scaler-load-empty", GS + ".load_state_dict", b_grad_scaler_load(lambda s: {}),
         RuntimeError, r"The source state dict is empty", graph=False),
    case("grad-scaler-load-nan-factor", GS + ".load_state_dict",
         b_grad_scaler_load(_with(scale=2.0, growth_factor=NAN)), ValueError,
         r"state_dict\['growth_factor'\] must be a finite real number > 1; got nan", graph=False),
    case("grad-scaler-in-a-graph", GS, lambda c: lambda: nls.GradScaler(), RuntimeError,
         r"GradScaler needs eager execution: .*tf\.compat\.v1\.enable_eager_execution\(\) .*"
         r"In a graph, use NPULossScaleOptimizer"),
    case("grad-scaler-step-without-apply-gradients", GS + ".step", b_grad_scaler_step_no_optimizer,
         TypeError, r"optimizer must have apply_gradients .*got <object object", graph=False),
    case("optimizer-thread-not-a-scaler", "OptimizerThread(...)",
         lambda c: lambda: nls.OptimizerThread("x"), TypeError,
         r"scaler must be an npu_loss_scale\.GradScaler; got 'x'", graph=False),
    case("optimizer-thread-max-pending-zero", "OptimizerThread(...)",
         lambda c: lambda: nls.OptimizerThread(nls.GradScaler(), max_pending=0), ValueError,
         r"max_pending must be an integer >= 1; got 0", graph=False),
    # Keras
    case("keras-inner-not-keras", KERAS, b_keras(inner="sgd"), TypeError,
         r"inner_optimizer must be a Keras optimizer .*got 'sgd'", graph=False),
    case("keras-fixed-without-scale", KERAS, b_keras(dynamic=False), ValueError,
         r"initial_scale must be given when dynamic is False", graph=False),
    case("keras-initial-scale-nan", KERAS, b_keras(initial_scale=NAN), ValueError,
         r"initial_scale must be a finite real number >= 1; got nan", graph=False),
    case("keras-growth-steps-zero", KERAS, b_keras(dynamic_growth_steps=0), ValueError,
         r"dynamic_growth_steps must be an integer >= 1; got 0", graph=False),
    case("keras-checkpoint-nan-scale", KERAS_RESTORE, b_keras_checkpoint(0, np.nan),
         tf.errors.InvalidArgumentError,
         r"loss scale variable (current_loss_scale|dynamic_scale) holds nan; accepted: a "
         r"finite number >= 1", graph=False),
    case("keras-checkpoint-scale-below-one", KERAS_RESTORE, b_keras_checkpoint(0, 0.5),
         tf.errors.InvalidArgumentError,
         r"loss scale variable (current_loss_scale|dynamic_scale) holds 0\.5; accepted: a "
         r"finite number >= 1", graph=False),
    case("keras-checkpoint-negative-counter", KERAS_RESTORE, b_keras_checkpoint(1, -3),
         tf.errors.InvalidArgumentError,
         r"growth counter variable (good_steps|step_counter) holds -3; accepted: an integer >= 0",
         graph=False),
    case("keras-checkpoint-scale-shape", "tf.train.Checkpoint.restore (Keras optimizer)",
         b_keras_checkpoint_scale_shape, ValueError,
         r"NpuLossScaleOptimizer: the checkpoint being restored holds shape \(2,\) for "
         r"(current_loss_scale|dynamic_scale) .*accepted: shape \(\)", graph=False),
    # hooks
    case("hook-every-n-steps-zero", "LossScaleHook(...)",
         lambda c: lambda: nls.LossScaleHook(every_n_steps=0), ValueError,
         r"every_n_steps must be an integer >= 1; got 0"),
    case("hook-log-fn-not-callable", "LossScaleHook(...)",
         lambda c: lambda: nls.LossScaleHook(log_fn="print"), TypeError,
         r"log_fn must be a callable taking the message string, or None; got 'print'"),
    case("clear-hook-backend-unknown", "OverflowStatusClearHook(...)",
         lambda c: lambda: nls.OverflowStatusClearHook(backend="gpu"), ValueError,
         r"backend must be one of 'npu', 'emulation', 'inf_nan'; got 'gpu'"),
    # flags, emulation functions
    case("bert-flag-negative", "loss_scale_manager_from_flag",
         lambda c: lambda: nls.loss_scale_manager_from_flag(-1), ValueError,
         r"npu_bert_loss_scale must be 0 \(dynamic loss scaling.*or a number >= 1 .*got -1"),
    case("bert-flag-not-a-number", "loss_scale_manager_from_flag",
         lambda c: lambda: nls.loss_scale_manager_from_flag("abc"), ValueError,
         r"npu_bert_loss_scale must be 0 .*got 'abc'"),
    case("set-sat-mode-out-of-range", "set_device_sat_mode",
         lambda c: lambda: nls.set_device_sat_mode(2), ValueError,
         r"mode must be 0 \(saturation\) or 1 \(INF/NaN\); got 2", graph=False),
    case("sat-mode-env-variable-bad", "NPU_LOSS_SCALE_SAT_MODE=2, then get_device_sat_mode",
         b_sat_mode_env, ValueError, r"environment variable NPU_LOSS_SCALE_SAT_MODE must be 0 or "
                                     r"saturation, 1 or inf_nan; got '2'", graph=False),
    case("rank-size-env-variable-not-an-int",
         "RANK_SIZE=two, then emulate's --overflow-report (report_files.entry_point_tools)",
         b_rank_size_env, ValueError,
         r"environment variable RANK_SIZE must be an integer; got 'two'", graph=False),
    case("saturate-integer-tensor", "saturate", lambda c: lambda: nls.saturate(tf.constant(1)),
         TypeError, r"x must be a floating-point tensor \(float16, bfloat16, float32 or "
                    r"float64\); got dtype int32"),
    case("saturate-every-op-integer-dtype", "saturation.saturate_every_op",
         b_saturate_every_op(("int32",)), ValueError,
         r"dtypes must name at least one floating dtype .*got \('int32',\)"),
    case("clear-overflow-status-backend-unknown", "clear_overflow_status",
         lambda c: lambda: nls.clear_overflow_status(backend="x"), ValueError,
         r"backend must be one of 'npu', 'emulation', 'inf_nan'; got 'x'"),
    # npu_bridge shim
    case("run-config-iterations-zero", "npu_bridge NPURunConfig(...)",
         b_run_config(iterations_per_loop=0), ValueError,
         r"iterations_per_loop must be an int >= 1; got 0", needs_estimator=True),
    case("run-config-unknown-option", "npu_bridge NPURunConfig(...)",
         b_run_config(iteration_per_loop=2), TypeError,
         r"NPURunConfig got unknown option\(s\) iteration_per_loop; accepted: the RunConfig "
         r"arguments .*iterations_per_loop", needs_estimator=True),
    case("run-config-precision-mode-unknown", "npu_bridge NPURunConfig(...)",
         b_run_config(precision_mode="half"), ValueError,
         r"precision_mode must be one of 'allow_fp32_to_fp16', .*got 'half'",
         needs_estimator=True),
    case("run-config-bool-option-not-bool", "npu_bridge NPURunConfig(...)",
         b_run_config(mix_compile_mode="yes"), TypeError,
         r"mix_compile_mode must be True or False; got 'yes'", needs_estimator=True),
    case("run-config-modify-mixlist-not-a-path", "npu_bridge NPURunConfig(...)",
         b_run_config(modify_mixlist=3), TypeError,
         r"modify_mixlist must be the path of a JSON file \(str\) or None; got 3",
         needs_estimator=True),
    case("modify-mixlist-unknown-key", "precision_lists.set_modify_mixlist(...)",
         b_mixlist_bad_key, ValueError,
         r"set_modify_mixlist: the dict has the key\(s\) 'blacklist'; accepted keys: "
         r"'black-list', 'white-list', 'gray-list'"),
    case("modify-mixlist-env-file-missing", "NPU_LOSS_SCALE_MODIFY_MIXLIST (a session or TF2 op "
         "under a mixed precision_mode)", b_mixlist_env_missing, ValueError,
         r"the environment variable NPU_LOSS_SCALE_MODIFY_MIXLIST: cannot read the file "
         r"'no_such_mixlist_for_npu_loss_scale.json'"),
    # the emulate entry point
    case("emulate-no-script", CLI, b_cli([], stderr=r"error: the script to run is missing"),
         behaviour="exit status 2; stderr: usage and 'the script to run is missing'",
         graph=False),
    case("emulate-script-not-found", CLI,
         b_cli(["no_such_script_for_npu_loss_scale.py"],
               stderr=r"no such script: no_such_script_for_npu_loss_scale\.py"),
         behaviour="exit status 2; stderr: 'no such script: <path>'", graph=False),
    case("emulate-unknown-flag", CLI, b_cli(["--bogus", "x.py"],
                                            stderr=r"unrecognized arguments: --bogus"),
         behaviour="exit status 2; stderr: usage and 'unrecognized arguments: --bogus'",
         graph=False),
    case("emulate-sat-mode-out-of-range", CLI,
         b_cli(["--sat-mode", "3", "x.py"],
               stderr=r"argument --sat-mode: invalid choice: '3' \(choose from saturation, "
                      r"inf_nan, or their numbers 0, 1\)"),
         behaviour="exit status 2; stderr: \"argument --sat-mode: invalid choice: '3' (choose "
                   "from saturation, inf_nan, or their numbers 0, 1)\"", graph=False),
    case("emulate-ranks-zero", CLI, b_cli(["--ranks", "0", "x.py"],
                                          stderr=r"argument --ranks/-np: must be an int >= 1; "
                                                 r"got 0"),
         behaviour="exit status 2; stderr: 'argument --ranks/-np: must be an int >= 1; got 0'",
         graph=False),
    case("emulate-ranks-not-an-int", CLI, b_cli(["--ranks", "two", "x.py"],
                                                stderr=r"argument --ranks/-np: invalid int "
                                                       r"value: 'two'"),
         behaviour="exit status 2; stderr: \"argument --ranks/-np: invalid int value: 'two'\"",
         graph=False),
    case("emulate-precision-mode-unknown", CLI,
         b_cli(["--precision-mode", "half", "x.py"],
               stderr=r"argument --precision-mode: invalid choice: 'half' \(choose from "
                      r"allow_fp32_to_fp16, .*force_lowerprecision\)"),
         behaviour="exit status 2; stderr: \"argument --precision-mode: invalid choice: 'half' "
                   "(choose from allow_fp32_to_fp16, ...)\"", graph=False),
    case("emulate-modify-mixlist-missing", CLI,
         b_cli(["--modify-mixlist", "no_such_mixlist_for_npu_loss_scale.json", "x.py"],
               stderr=r"--modify-mixlist: cannot read the file "
                      r"'no_such_mixlist_for_npu_loss_scale.json' \(.*\); it must be the path of "
                      r"a JSON file with the keys black-list, white-list, gray-list"),
         behaviour="exit status 2; stderr: \"--modify-mixlist: cannot read the file '...' "
                   "(No such file or directory); it must be the path of a JSON file ...\"",
         graph=False),
    case("emulate-saturate-dtypes-not-floating", CLI,
         b_cli(["--saturate-every-op", "--saturate-dtypes", "int32", "x.py"],
               stderr=r"--saturate-dtypes must be a comma-separated list of floating dtypes "
                      r"\(float16, bfloat16, float32, float64\); got 'int32'"),
         behaviour="exit status 2; stderr: '--saturate-dtypes must be a comma-separated list of "
                   "floating dtypes ...; got 'int32''", graph=False),
    case("emulate-plain-with-device-options", CLI,
         b_cli(["--plain", "--saturate-every-op", "--precision-mode", "force_fp16", "x.py"],
               stderr=r"--plain runs the script without the device's arithmetic; "
                      r"--saturate-every-op and --precision-mode would emulate it"),
         behaviour="exit status 2; stderr: \"--plain runs the script without the device's "
                   "arithmetic; --saturate-every-op and --precision-mode would emulate it ...\"",
         graph=False),
    case("emulate-module-flag-without-module", CLI,
         b_cli(["-m"], stderr=r"-m needs a module name to run"),
         behaviour="exit status 2; stderr: '-m needs a module name to run'", graph=False),
    case("emulate-module-not-found", CLI + " -m <missing>", b_cli_missing_module,
         behaviour="exit status 1; stderr: \"No module named '<name>'\" (as `python -m`)",
         graph=False),
    # npu-loss-scale doctor: refused before the script starts
    case("doctor-steps-zero", DOCTOR,
         b_doctor(["--out", "{tmp}/out", "--steps", "0", "x.py"],
                  stderr=r"argument --steps: must be an int >= 1 \(the number of loss-scale "
                         r"steps to run\); got 0"),
         behaviour="exit status 2; stderr: 'argument --steps: must be an int >= 1 (...); got 0'",
         graph=False),
    case("doctor-modes-unknown", DOCTOR,
         b_doctor(["--out", "{tmp}/out", "--modes", "fp16", "x.py"],
                  stderr=r"argument --modes: invalid value 'fp16': a comma-separated list of "
                         r"distinct modes from saturation, inf_nan"),
         behaviour="exit status 2; stderr: \"argument --modes: invalid value 'fp16': a "
                   "comma-separated list of distinct modes from saturation, inf_nan ...\"",
         graph=False),
    case("doctor-script-not-found", DOCTOR,
         b_doctor(["--out", "{tmp}/out", "no_such_script_for_npu_loss_scale.py"],
                  stderr=r"no such script: 'no_such_script_for_npu_loss_scale\.py' \(give a "
                         r"Python file, or -m and a module name\)"),
         behaviour="exit status 2; stderr: \"no such script: '<path>' (give a Python file, or "
                   "-m and a module name)\"", graph=False),
    case("doctor-out-not-writable", DOCTOR,
         b_doctor(["--out", "{file}/report", __file__],
                  stderr=r"--out must be a folder the report can be written to; '.*a_file/report' "
                         r"cannot be written"),
         behaviour="exit status 2, before the script starts; stderr: \"--out must be a folder "
                   "the report can be written to; '<path>' cannot be written (...)\"",
         graph=False),
]


def _behaviour(c):
    return c.behaviour or "raises %s" % _exception_name(c.raises)


def _exception_name(exc):
    module = exc.__module__
    if module.startswith("tensorflow"):
        return "tf.errors." + exc.__name__
    return exc.__name__


# Rows of TF 2 code (eager state_dict and tf.train.Checkpoint objects, GradScaler, Keras's
# LossScaleOptimizer, which TF 1.15 does not have): on the tf115 stack they skip, the others run.
# (GradScaler needs eager execution, which 1.15 switches on only at start-up: its rows that get
# past the arguments' checks skip there; tests/test_grad_scaler_tf1.py runs it eagerly.)
TF2_ROWS = frozenset(
    ["load-state-dict-" + k for k in ("not-a-dict", "missing-key", "unknown-key", "nan-scale",
                                       "negative-counter", "string-value")]
    + ["megatron-load-negative-tracker", "megatron-load-below-min-scale",
       "checkpoint-object-wrong-shape"]
    + ["grad-scaler-" + k for k in ("restored-nan-scale", "checkpoint-wrong-shape",
                                     "step-after-ignored-unscale", "load-empty",
                                     "load-nan-factor", "step-without-apply-gradients")]
    + ["optimizer-thread-max-pending-zero"]
    + ["keras-" + k for k in ("inner-not-keras", "fixed-without-scale", "initial-scale-nan",
                               "growth-steps-zero", "checkpoint-nan-scale",
                               "checkpoint-scale-below-one", "checkpoint-negative-counter",
                               "checkpoint-scale-shape")])


@pytest.mark.parametrize("c", CASES, ids=[c.kind for c in CASES])
def test_bad_input(c, monkeypatch, tmp_path):
    if c.needs_estimator and not HAS_ESTIMATOR:
        pytest.skip("needs TensorFlow's Estimator (tf.compat.v1.estimator), absent from this "
                    "TensorFlow")
    if TF1 and c.kind in TF2_ROWS:
        pytest.skip(TF2_ONLY_REASON)
    ctx = types.SimpleNamespace(mp=monkeypatch, tmp=tmp_path)
    graph = tf.Graph() if c.graph else None
    with graph.as_default() if graph is not None else contextlib.nullcontext():
        built = c.build(ctx)
        trigger, verify = built if isinstance(built, tuple) else (built, None)
        assert (verify is not None) == (c.kind in _STATE_INTACT), \
            "a row marked 'state intact' must verify the state, and only those"
        if c.raises is None:
            trigger()
        else:
            with pytest.raises(c.raises) as info:
                trigger()
            assert re.search(c.match, str(info.value)), \
                "message %r does not match %r" % (str(info.value)[:3000], c.match)
        if verify is not None:
            verify()


def test_the_table_covers_enough_distinct_kinds_and_entry_points():
    kinds = [c.kind for c in CASES]
    assert len(kinds) == len(set(kinds)) and len(kinds) >= 40
    assert all(c.raises is not None or c.behaviour for c in CASES)
    assert all((c.raises is None) == (c.match is None) for c in CASES)
    assert len({c.entry.split(".")[0].split(" with ")[0] for c in CASES}) >= 25


# -- the documentation table --------------------------------------------------------------------
DOC_HEAD = """# Bad inputs

What each public constructor and entry point does with a bad input: a clear error that names
the argument, the value given and what is accepted, or correct handling. A failed
`load_state_dict()` or checkpoint restore leaves the state from before it intact (the rows
marked *state intact* assert it).

This table is generated from `tests/test_bad_inputs.py` (`python tests/test_bad_inputs.py`
rewrites it; `test_doc_table_matches_the_test_table` fails when they differ). Reproduce with

    bash scripts/test.sh -k test_bad_inputs

or, on one TensorFlow, `python -m pytest tests/test_bad_inputs.py -q`.
The message column is the regular expression the error's message (for the command line: its
stderr) must contain. The `npu_bridge` `NPURunConfig` rows need TensorFlow's Estimator (TF 2.15);
on TF 2.21 they skip. On TF 1.15 (the Ascend TF1 adapter's stack) the rows of TF 2 code skip
(`GradScaler`, Keras's `LossScaleOptimizer`, eager `load_state_dict` and `tf.train.Checkpoint`
objects: `TF2_ROWS` in the test); the other rows run there.

One behaviour is TensorFlow's own: a `tf.compat.v1.train.Saver` does not check shapes when it
restores, so a checkpoint whose `loss_scale` holds two elements is restored as is; the manager's
`state_dict()` then refuses it naming the variable and the shape (row
`checkpoint-shape-mismatch`). A restore (name-based `Saver` or `tf.train.Checkpoint`) writes
whatever the checkpoint holds, so a state no rule can reach (NaN, inf, zero or below-minimum
scale, negative counters, a non-scalar) is refused by the first training step after it, which
raises `InvalidArgumentError` naming the variable, its value and what is accepted, before
anything of the step is applied (rows `checkpoint-*-first-step`,
`megatron-checkpoint-below-min-scale`). A `tf.train.Checkpoint` restore checks the shapes of
all the values of an object's loss-scale state before it assigns any (GradScaler, the managers,
the Megatron scalers, the Keras optimizer on Keras 2 and 3): a value of the wrong shape is
refused with none of that state changed (rows `grad-scaler-checkpoint-wrong-shape`,
`checkpoint-object-wrong-shape`, `keras-checkpoint-scale-shape`).

"""


def _counts():
    """(kinds, entry points, errors raised, command-line exits, handled, state intact)."""
    cli = sum(c.entry.startswith(CLI) for c in CASES)
    raised = sum(c.raises is not None for c in CASES)
    return (len(CASES), len({c.entry for c in CASES}), raised, cli, len(CASES) - raised - cli,
            len(_STATE_INTACT))


def test_reliability_page_figures_are_those_of_the_table():
    with open(os.path.join(HERE, os.pardir, "docs", "reliability.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    match = re.search(r"one table of (\d+) kinds of bad input over (\d+) public entry points.*?"
                      r"(\d+) raise a clear error, (\d+) exit the command line with a message, "
                      r"(\d+) are handled correctly, and (\d+) failed loads or restores", text)
    assert match, "docs/reliability.md's 'Bad inputs' section lost its figures"
    assert tuple(int(g) for g in match.groups()) == _counts()


def test_readme_headline_figures_are_those_of_the_table():
    with open(os.path.join(HERE, os.pardir, "README.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    match = re.search(r"(\d+) kinds of bad input over (\d+) entry points", text)
    assert match, "README's results table lost the bad-input figures"
    assert tuple(int(g) for g in match.groups()) == _counts()[:2]


def _md(text):
    return text.replace("|", "\\|")


def doc_text():
    summary = ("%d kinds over %d entry points: %d raise a clear error, %d exit the command line "
               "with a message, %d are handled correctly; %d of the errors also assert that the "
               "state from before is intact." % _counts())
    lines = [DOC_HEAD.rstrip("\n"), "", summary, "",
             "| # | kind | entry point | behaviour | message must match |",
             "|---|------|-------------|-----------|--------------------|"]
    for i, c in enumerate(CASES, 1):
        behaviour = _behaviour(c)
        lines.append("| %d | `%s` | `%s` | %s | `%s` |" % (
            i, c.kind, _md(c.entry), _md(behaviour + _intact_note(c)),
            _md(_shown_match(c))))
    return "\n".join(lines) + "\n"


def _shown_match(c):
    match = c.match or getattr(c.build, "stderr_match", None)
    return match if match else "-"


def _intact_note(c):
    return "; state intact" if c.kind in _STATE_INTACT else ""


_STATE_INTACT = {
    "load-state-dict-not-a-dict", "load-state-dict-missing-key", "load-state-dict-unknown-key",
    "load-state-dict-nan-scale", "load-state-dict-negative-counter",
    "load-state-dict-string-value", "load-state-dict-int32-overflow-graph",
    "fixed-load-dynamic-state", "megatron-load-negative-tracker", "checkpoint-missing-variables",
    "checkpoint-dtype-mismatch", "checkpoint-corrupt", "checkpoint-path-missing",
    "scheduler-load-negative-steps", "grad-scaler-load-empty", "grad-scaler-load-nan-factor",
    "keras-checkpoint-nan-scale", "keras-checkpoint-scale-below-one",
    "keras-checkpoint-negative-counter",
    "checkpoint-nan-scale-first-step", "checkpoint-negative-counter-first-step",
    "checkpoint-shape-mismatch-first-step", "megatron-checkpoint-below-min-scale",
    "grad-scaler-checkpoint-wrong-shape", "checkpoint-object-wrong-shape",
    "keras-checkpoint-scale-shape",
}


def test_doc_table_matches_the_test_table():
    with open(DOC, encoding="utf-8") as f:
        assert f.read() == doc_text(), "docs/bad-inputs.md is stale: run python " \
                                       "tests/test_bad_inputs.py"


if __name__ == "__main__":
    with open(DOC, "w", encoding="utf-8") as out:
        out.write(doc_text())
    print("wrote %s (%d kinds)" % (os.path.normpath(DOC), len(CASES)))
