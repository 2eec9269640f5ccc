"""A checkpoint restore that is refused changes none of the object's loss-scale state.

TensorFlow restores a ``tf.train.Checkpoint`` one variable at a time and checks a value's shape
only when it assigns it: a wrong-shaped value used to be refused after the variables restored
before it had taken their checkpoint values (a GradScaler with the checkpoint's factors and
growth count but its own scale). Every value of one object's state is now checked before any is
assigned, for GradScaler, the Ascend managers, the Megatron scalers and the Keras loss-scale
optimizers: immediately (the object exists when the checkpoint is read) and deferred (read
first, the object attached afterwards). A value of the wrong dtype is refused by TensorFlow's
read of the file, before anything is assigned; a name-based ``tf.compat.v1.train.Saver`` assigns
a wrong shape as is and the first step refuses it (tests/test_restored_state.py).

Checkpoints are tampered independently of the package (``test_restored_state._tamper``: the
tensors read with ``tf.train.load_checkpoint``, one replaced, all written again by a plain
Saver, the object graph included). The values an object must keep are its constructor's,
written out here by hand.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from keras_versions import (KERAS3, NO_JIT, NO_LEGACY_REASON, OPTIMIZER_V2_ONLY,
                            legacy_optimizers)
from test_restored_state import _tamper
from tf_versions import tf2_only

pytestmark = tf2_only

FIXTURES = os.path.join(os.path.dirname(__file__), "data", "object_checkpoints")
_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


# -- the objects: (build with the state it must keep, that state, a state for the checkpoint) ---
def _grad_scaler(saved=False):
    if saved:
        scaler = nls.GradScaler(init_scale=2.0 ** 20, growth_factor=3.0, backoff_factor=0.75,
                                growth_interval=40)
        scaler._growth_tracker.assign(7)   # pylint: disable=protected-access
        return scaler
    return nls.GradScaler(init_scale=2.0 ** 10, growth_factor=4.0, backoff_factor=0.25,
                          growth_interval=9)


GRAD_SCALER_KEPT = {"scale": 1024.0, "growth_factor": 4.0, "backoff_factor": 0.25,
                    "growth_interval": 9, "_growth_tracker": 0}


def _assign(manager, values):
    weights = manager._state()["_weights"]   # pylint: disable=protected-access
    for name, value in values.items():
        weights[name].assign(value)


def _exponential(saved=False):
    manager = nls.ExponentialUpdateLossScaleManager(2.0 ** (20 if saved else 10),
                                                    incr_every_n_steps=100)
    if saved:
        _assign(manager, {"good_steps": 17, "bad_steps": 1})
    return manager


EXPONENTIAL_KEPT = {"loss_scale": 1024.0, "good_steps": 0, "bad_steps": 0}


def _dynamic(saved=False):
    scaler = nls.DynamicGradScaler(2.0 ** (20 if saved else 10), min_scale=4.0,
                                   growth_factor=2.0, backoff_factor=0.5, growth_interval=100,
                                   hysteresis=2)
    if saved:
        _assign(scaler, {"growth_tracker": 13, "hysteresis_tracker": 1,
                         "min_scale_overflow_steps": 3})
    return scaler


DYNAMIC_KEPT = {"scale": 1024.0, "growth_tracker": 0, "hysteresis_tracker": 2,
                "min_scale_overflow_steps": 0}

# (name, build, state kept, checkpoint names of the state variables)
OBJECTS = [
    ("GradScaler", _grad_scaler, GRAD_SCALER_KEPT,
     ["_scale", "_growth_tracker", "_growth_factor", "_backoff_factor", "_growth_interval"]),
    ("ExponentialUpdateLossScaleManager", _exponential, EXPONENTIAL_KEPT,
     ["loss_scale", "good_steps", "bad_steps"]),
    ("DynamicGradScaler", _dynamic, DYNAMIC_KEPT,
     ["scale", "growth_tracker", "hysteresis_tracker", "min_scale_overflow_steps"]),
]
CASES = [(name, build, kept, child) for name, build, kept, children in OBJECTS
         for child in children]
IDS = ["%s-%s" % (name, child) for name, _, _, child in CASES]


def _values(obj):
    """The object's state: GradScaler's ``state_dict()``; a manager's variables by checkpoint
    name (``state_dict()`` of DynamicGradScaler leaves ``min_scale_overflow_steps`` out)."""
    if isinstance(obj, nls.GradScaler):
        return obj.state_dict()
    weights = obj._state()["_weights"]   # pylint: disable=protected-access
    return {name: var.numpy().item() for name, var in weights.items()}


def _wrong_shape(value):
    return np.stack([value, value])


def _wrong_dtype(value):
    return value.astype(np.float64 if value.dtype.kind == "i" else np.int64)


def _tampered(tmp_path, build, child, change):
    """A checkpoint of ``build(saved=True)`` as ``obj``, with ``obj/<child>`` changed."""
    good = tf.train.Checkpoint(obj=build(saved=True)).write(str(tmp_path / "good"))
    key = "obj/%s%s" % (child, _SUFFIX)
    return _tamper(good, key, change(tf.train.load_checkpoint(good).get_tensor(key)),
                   str(tmp_path / "bad"))


@pytest.mark.parametrize("name,build,kept,child", CASES, ids=IDS)
def test_a_wrong_shaped_value_is_refused_before_anything_is_restored(name, build, kept, child,
                                                                     tmp_path):
    bad = _tampered(tmp_path, build, child, _wrong_shape)
    obj = build()
    with pytest.raises(ValueError) as caught:
        tf.train.Checkpoint(obj=obj).read(bad)
    message = str(caught.value)
    assert name in message and child.lstrip("_") in message, message
    assert "shape (2,)" in message and "accepted: shape ()" in message, message
    assert _values(obj) == kept


@pytest.mark.parametrize("name,build,kept,child", CASES, ids=IDS)
def test_a_deferred_restore_of_a_wrong_shaped_value_changes_nothing(name, build, kept, child,
                                                                    tmp_path):
    """Read before the object is attached: the restore runs when it is, and is refused there."""
    bad = _tampered(tmp_path, build, child, _wrong_shape)
    checkpoint = tf.train.Checkpoint()
    checkpoint.read(bad)
    obj = build()
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        checkpoint.obj = obj
    assert _values(obj) == kept


@pytest.mark.parametrize("name,build,kept,child", CASES, ids=IDS)
def test_a_wrong_dtype_is_refused_before_anything_is_restored(name, build, kept, child,
                                                               tmp_path):
    """TensorFlow's read of the file refuses it (naming the key and both dtypes)."""
    bad = _tampered(tmp_path, build, child, _wrong_dtype)
    obj = build()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"%s.*dtype" % child):
        tf.train.Checkpoint(obj=obj).read(bad)
    assert _values(obj) == kept


@pytest.mark.parametrize("name,build,kept,child", CASES[:1] + CASES[5:6] + CASES[8:9],
                         ids=IDS[:1] + IDS[5:6] + IDS[8:9])
def test_after_a_refused_restore_a_good_checkpoint_restores_everything(name, build, kept, child,
                                                                       tmp_path):
    bad = _tampered(tmp_path, build, child, _wrong_shape)
    good = str(tmp_path / "good")
    obj = build()
    with pytest.raises(ValueError):
        tf.train.Checkpoint(obj=obj).read(bad)
    tf.train.Checkpoint(obj=obj).read(good).assert_consumed()
    assert _values(obj) == _values(build(saved=True)) != kept


# -- the checkpoint format is unchanged -------------------------------------------------------
# tests/data/object_checkpoints/ were written by the package before the staged restore (commit
# d9ac139, TensorFlow 2.15.1): tf.train.Checkpoint(scaler=GradScaler(512.0, 4.0, 0.25, 9))
# with a growth count of 5; (manager=ExponentialUpdateLossScaleManager(4096.0, 100)) with
# good_steps 17, bad_steps 2; (scaler=DynamicGradScaler(16384.0, min_scale=4.0, ...,
# hysteresis=3)) with growth_tracker 11, hysteresis_tracker 1, min_scale_overflow_steps 0.
FIXTURE_CASES = [
    ("grad_scaler", "scaler", lambda: nls.GradScaler(),
     {"scale": 512.0, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 9,
      "_growth_tracker": 5}),
    ("exponential_manager", "manager",
     lambda: nls.ExponentialUpdateLossScaleManager(1.0, incr_every_n_steps=100),
     {"loss_scale": 4096.0, "good_steps": 17, "bad_steps": 2}),
    ("dynamic_grad_scaler", "scaler",
     lambda: nls.DynamicGradScaler(1024.0, min_scale=4.0, growth_factor=2.0,
                                   backoff_factor=0.5, growth_interval=100, hysteresis=3),
     {"scale": 16384.0, "growth_tracker": 11, "hysteresis_tracker": 1,
      "min_scale_overflow_steps": 0}),
]


@pytest.mark.parametrize("fixture,attr,build,want", FIXTURE_CASES,
                         ids=[c[0] for c in FIXTURE_CASES])
def test_a_checkpoint_written_before_the_staged_restore_still_restores(fixture, attr, build,
                                                                       want, tmp_path):
    path = os.path.join(FIXTURES, fixture)
    obj = build()
    tf.train.Checkpoint(**{attr: obj}).read(path).assert_consumed()
    assert _values(obj) == want
    # deferred
    checkpoint = tf.train.Checkpoint()
    checkpoint.read(path)
    later = build()
    setattr(checkpoint, attr, later)
    assert _values(later) == want
    # and the package still writes the same keys, with the same values
    written = tf.train.Checkpoint(**{attr: obj}).write(str(tmp_path / "again"))
    old, new = tf.train.load_checkpoint(path), tf.train.load_checkpoint(written)
    keys = sorted(old.get_variable_to_shape_map())
    assert sorted(new.get_variable_to_shape_map()) == keys
    for key in keys:
        if key != "_CHECKPOINTABLE_OBJECT_GRAPH":
            np.testing.assert_array_equal(new.get_tensor(key), old.get_tensor(key))


def test_a_grad_scaler_checkpoint_written_without_the_package_restores(tmp_path):
    """The format written by a plain tf.Module with the scaler's five variables."""
    plain = tf.Module()
    plain._scale = tf.Variable(64.0)                   # pylint: disable=protected-access
    plain._growth_tracker = tf.Variable(3)             # pylint: disable=protected-access
    plain._growth_factor = tf.Variable(1.5)            # pylint: disable=protected-access
    plain._backoff_factor = tf.Variable(0.125)         # pylint: disable=protected-access
    plain._growth_interval = tf.Variable(11)           # pylint: disable=protected-access
    path = tf.train.Checkpoint(scaler=plain).write(str(tmp_path / "plain"))
    scaler = nls.GradScaler()
    tf.train.Checkpoint(scaler=scaler).read(path).assert_consumed()
    assert scaler.state_dict() == {"scale": 64.0, "growth_factor": 1.5, "backoff_factor": 0.125,
                                   "growth_interval": 11, "_growth_tracker": 3}


# -- Keras 2's loss-scale optimizer: the package's loss-scale state ------------------------------
def _keras2_optimizer(inner, saved=False):
    from npu_loss_scale.keras import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    opt = NpuLossScaleOptimizer(inner(), initial_scale=2.0 ** (20 if saved else 10),
                                dynamic_growth_steps=50)
    if saved:
        opt.dynamic_counter.assign(1)
    return opt


def _keras2_inners():
    """Keras 2.6: OptimizerV2 only; Keras 2.11-2.15: the legacy family and the new one."""
    inners = [lambda: legacy_optimizers().SGD(0.1)]
    if not OPTIMIZER_V2_ONLY:
        inners.append(lambda: tf.keras.optimizers.SGD(0.1))
    return inners


def _keras2_state(opt):
    return {"current_loss_scale": float(opt.loss_scale.numpy()),
            "good_steps": int(opt.dynamic_counter.numpy()),
            "last_step_finite": bool(opt.last_step_finite.numpy())}


KERAS2_KEPT = {"current_loss_scale": 1024.0, "good_steps": 0, "last_step_finite": True}


@pytest.mark.skipif(KERAS3, reason=NO_LEGACY_REASON)
@pytest.mark.parametrize("child", ["current_loss_scale", "good_steps", "last_step_finite"])
def test_keras2_a_wrong_shaped_loss_scale_state_is_refused_with_nothing_restored(child,
                                                                               tmp_path):
    """Keras 3's own optimizer variables are the scale and counter there; see docs/keras.md."""
    for i, inner in enumerate(_keras2_inners()):
        saved = _keras2_optimizer(inner, saved=True)
        assert _keras2_state(saved)["good_steps"] == 1
        good = tf.train.Checkpoint(obj=saved).write(str(tmp_path / ("good%d" % i)))
        key = next(k for k in tf.train.load_checkpoint(good).get_variable_to_shape_map()
                   if k.endswith("loss_scale/%s%s" % (child, _SUFFIX)))
        bad = _tamper(good, key, _wrong_shape(tf.train.load_checkpoint(good).get_tensor(key)),
                      str(tmp_path / ("bad%d" % i)))
        opt = _keras2_optimizer(inner)
        with pytest.raises(ValueError, match=r"NpuLossScaleOptimizer: the checkpoint being "
                                             r"restored holds shape \(2,\) for %s" % child):
            tf.train.Checkpoint(obj=opt).read(bad)
        assert _keras2_state(opt) == KERAS2_KEPT
        tf.train.Checkpoint(obj=opt).read(good)
        assert _keras2_state(opt) == {"current_loss_scale": 2.0 ** 20, "good_steps": 1,
                                      "last_step_finite": True}


# -- the Keras optimizer of either Keras: its whole loss-scale state, however it is reached ------
# Keras 3's scale and counter are Keras's own optimizer variables, which Keras tracks twice (by
# name and in the optimizer's list of variables) and makes only when the optimizer is built.
KERAS_STATE = (["dynamic_scale", "step_counter", "last_step_finite"] if KERAS3
               else ["current_loss_scale", "good_steps", "last_step_finite"])
KERAS_KEPT = dict(zip(KERAS_STATE, [1024.0, 0, True]))
KERAS_SAVED = dict(zip(KERAS_STATE, [2.0 ** 20, 3, False]))


def _keras_optimizer(saved=False, build=True):
    """Keras 3's optimizer (built on one weight unless ``build=False``), or Keras 2's around
    its newest optimizer family (its loss-scale state exists from the start)."""
    from npu_loss_scale.keras import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    opt = NpuLossScaleOptimizer(_keras2_inners()[-1]() if not KERAS3
                                else tf.keras.optimizers.SGD(0.1),
                                initial_scale=2.0 ** (20 if saved else 10),
                                dynamic_growth_steps=50)
    if build:
        _keras_build(opt)
    if saved:
        _keras_counter(opt).assign(3)
        opt.last_step_finite.assign(False)
    return opt


def _keras_build(opt):
    if KERAS3:
        opt.build([tf.Variable([1.0, 2.0])])


def _keras_counter(opt):
    return opt.step_counter if KERAS3 else opt.dynamic_counter


def _keras_state(opt):
    return dict(zip(KERAS_STATE, [float(opt.loss_scale.numpy()),
                                  int(_keras_counter(opt).numpy()),
                                  bool(opt.last_step_finite.numpy())]))


def _keras_read(checkpoint_path, opt, how):
    """Restores ``checkpoint_path`` into ``opt``: ``built`` (the optimizer as it is), ``attached``
    (the checkpoint read first, the optimizer attached afterwards), ``before-build`` (read into an
    optimizer not built yet, then built: Keras 3 makes its state there, and the restore waits
    for it, but a value that does not fit is refused by the read already; Keras 2's state exists
    from the start)."""
    if how == "attached":
        checkpoint = tf.train.Checkpoint()
        checkpoint.read(checkpoint_path)
        checkpoint.obj = opt
        return
    tf.train.Checkpoint(obj=opt).read(checkpoint_path)
    if how == "before-build":
        _keras_build(opt)


KERAS_HOW = ["built", "attached", "before-build"]


@pytest.mark.parametrize("how", KERAS_HOW)
@pytest.mark.parametrize("child", KERAS_STATE)
def test_keras_a_wrong_shaped_loss_scale_state_is_refused_with_nothing_restored(child, how,
                                                                              tmp_path):
    good = tf.train.Checkpoint(obj=_keras_optimizer(saved=True)).write(str(tmp_path / "good"))
    key = next(k for k in tf.train.load_checkpoint(good).get_variable_to_shape_map()
               if k.endswith("/%s%s" % (child, _SUFFIX)))
    bad = _tamper(good, key, _wrong_shape(tf.train.load_checkpoint(good).get_tensor(key)),
                  str(tmp_path / "bad"))
    opt = _keras_optimizer(build=how != "before-build")
    with pytest.raises(ValueError, match=r"NpuLossScaleOptimizer: the checkpoint being restored "
                                         r"holds shape \(2,\) for %s .*accepted: shape \(\) .*"
                                         r"Nothing was restored" % child):
        _keras_read(bad, opt, how)
    if how == "before-build":
        _keras_build(opt)      # Keras 3: the refused restore left nothing pending
    assert _keras_state(opt) == KERAS_KEPT
    later = _keras_optimizer(build=how != "before-build")
    _keras_read(good, later, how)
    assert _keras_state(later) == KERAS_SAVED


@pytest.mark.parametrize("how", KERAS_HOW)
def test_keras_after_a_refused_restore_a_good_checkpoint_restores_everything(how, tmp_path):
    good = tf.train.Checkpoint(obj=_keras_optimizer(saved=True)).write(str(tmp_path / "good"))
    key = next(k for k in tf.train.load_checkpoint(good).get_variable_to_shape_map()
               if k.endswith("/%s%s" % (KERAS_STATE[1], _SUFFIX)))
    bad = _tamper(good, key, _wrong_shape(tf.train.load_checkpoint(good).get_tensor(key)),
                  str(tmp_path / "bad"))
    opt = _keras_optimizer(build=how != "before-build")
    with pytest.raises(ValueError):
        _keras_read(bad, opt, how)
    status = tf.train.Checkpoint(obj=opt).read(good)
    if how == "before-build":
        _keras_build(opt)   # (the weight it is built on is not restored: Keras's matter)
    else:
        status.assert_existing_objects_matched()
    assert _keras_state(opt) == KERAS_SAVED


def _keras_model(scale):
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    opt = nls_keras().NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), initial_scale=scale,
                                            dynamic_growth_steps=50)
    model.compile(optimizer=opt, loss="mse", **NO_JIT)
    return model, opt


def nls_keras():
    from npu_loss_scale import keras  # pylint: disable=import-outside-toplevel
    return keras


def test_keras_model_fit_after_a_refused_restore_trains_from_the_state_it_had(tmp_path):
    """The usual order: the checkpoint read into a compiled model whose optimizer ``fit`` builds
    at its first step (on Keras 3 inside the traced step). The refusal comes from the read; the
    step builds the optimizer from its own initial state and trains."""
    x, y = np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32)
    saved_model, saved = _keras_model(2.0 ** 20)
    saved_model.fit(x, y, verbose=0)
    good = tf.train.Checkpoint(model=saved_model, optimizer=saved).write(str(tmp_path / "good"))
    key = next(k for k in tf.train.load_checkpoint(good).get_variable_to_shape_map()
               if k.endswith("/%s%s" % (KERAS_STATE[1], _SUFFIX)))
    bad = _tamper(good, key, _wrong_shape(tf.train.load_checkpoint(good).get_tensor(key)),
                  str(tmp_path / "bad"))
    model, opt = _keras_model(1024.0)
    with pytest.raises(ValueError, match=r"holds shape \(2,\) for %s" % KERAS_STATE[1]):
        tf.train.Checkpoint(model=model, optimizer=opt).read(bad)
    model.fit(x, y, verbose=0)          # one finite step from the optimizer's own state
    assert float(opt.loss_scale.numpy()) == 1024.0
    assert int(_keras_counter(opt).numpy()) == 1
    # a good checkpoint then restores the trained state: one more step counts on from it
    model, opt = _keras_model(1024.0)
    tf.train.Checkpoint(model=model, optimizer=opt).read(good)
    model.fit(x, y, verbose=0)
    assert float(opt.loss_scale.numpy()) == 2.0 ** 20
    assert int(_keras_counter(opt).numpy()) == 2


def test_under_a_strategy_the_keras_loss_scale_state_is_restored_all_or_nothing(tmp_path):
    with _strategy().scope():
        saved = _keras_optimizer(saved=True)
        opt = _keras_optimizer()
    good = tf.train.Checkpoint(obj=saved).write(str(tmp_path / "good"))
    key = next(k for k in tf.train.load_checkpoint(good).get_variable_to_shape_map()
               if k.endswith("/%s%s" % (KERAS_STATE[1], _SUFFIX)))
    bad = _tamper(good, key, _wrong_shape(tf.train.load_checkpoint(good).get_tensor(key)),
                  str(tmp_path / "bad"))
    with pytest.raises(ValueError, match=r"holds shape \(2,\) for %s" % KERAS_STATE[1]):
        tf.train.Checkpoint(obj=opt).read(bad)
    assert _keras_state(opt) == KERAS_KEPT
    tf.train.Checkpoint(obj=opt).read(good)
    assert _keras_state(opt) == KERAS_SAVED


# tests/data/object_checkpoints/keras{2,3}_optimizer were written before the staged restore of
# that Keras (keras2: commit 2219a2f^, TensorFlow 2.15.1; keras3: commit e1882d3, TensorFlow
# 2.21): tf.train.Checkpoint(optimizer=NpuLossScaleOptimizer(SGD(0.1), initial_scale=4096.0,
# dynamic_growth_steps=50)) with the growth counter at 7 and last_step_finite False; the Keras 3
# one built on a weight [1.0, 2.0], with its own iteration counter at 5. Keras 2.6's class (around
# OptimizerV2) restores the state from the Keras 2.15 one, under keys of its own.
def test_a_keras_checkpoint_written_before_the_staged_restore_still_restores(tmp_path):
    path = os.path.join(FIXTURES, "keras3_optimizer" if KERAS3 else "keras2_optimizer")
    want = dict(zip(KERAS_STATE, [4096.0, 7, False]))
    for how in ["built", "before-build"]:
        opt = _keras_optimizer(build=how != "before-build")
        checkpoint = tf.train.Checkpoint()
        status = checkpoint.read(path)
        checkpoint.optimizer = opt
        if how == "before-build":
            _keras_build(opt)
        else:
            status.assert_existing_objects_matched()
        assert _keras_state(opt) == want, how
    if OPTIMIZER_V2_ONLY:
        return   # Keras 2.6: another class (around OptimizerV2) than the one that wrote it
    # and the package still writes the same keys, and the same values for the optimizer's own
    # variables (a weight restored through an optimizer not built yet is Keras's matter)
    written = tf.train.Checkpoint(optimizer=opt).write(str(tmp_path / "again"))
    old, new = tf.train.load_checkpoint(path), tf.train.load_checkpoint(written)
    keys = sorted(old.get_variable_to_shape_map())
    assert sorted(new.get_variable_to_shape_map()) == keys
    for key in keys:
        if key != "_CHECKPOINTABLE_OBJECT_GRAPH" and "_trainable_variables" not in key:
            np.testing.assert_array_equal(new.get_tensor(key), old.get_tensor(key), key)


# -- a tf.compat.v1 graph: the restore ops refuse it when a session runs them -------------------
@pytest.mark.parametrize("child", ["loss_scale", "good_steps", "bad_steps"])
def test_in_a_graph_a_wrong_shaped_value_fails_the_restore_ops_with_nothing_assigned(child,
                                                                                    tmp_path):
    with tf.Graph().as_default():
        manager = nls.ExponentialUpdateLossScaleManager(2.0 ** 20, incr_every_n_steps=100)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(manager.variables[1].assign(17))
            good = tf.compat.v1.train.Checkpoint(obj=manager).save(str(tmp_path / "good"),
                                                                    session=sess)
    key = "obj/%s%s" % (child, _SUFFIX)
    bad = _tamper(good, key, _wrong_shape(tf.train.load_checkpoint(good).get_tensor(key)),
                  str(tmp_path / "bad"))
    with tf.Graph().as_default():
        manager = nls.ExponentialUpdateLossScaleManager(2.0 ** 10, incr_every_n_steps=100)
        checkpoint = tf.compat.v1.train.Checkpoint(obj=manager)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=r"ExponentialUpdateLossScaleManager: the checkpoint being "
                                     r"restored holds a value of shape\] \[2\] \[for %s; "
                                     r"accepted: shape \(\) " % child):
                checkpoint.restore(bad).run_restore_ops(sess)
            assert sess.run(manager.variables) == [1024.0, 0, 0]
            checkpoint.restore(good).run_restore_ops(sess)
            assert sess.run(manager.variables) == [2.0 ** 20, 17, 0]


# -- a manager whose variables are made on first use: restored when they are, all or nothing ---
class _LazyManager(nls.LossScaleManager):
    """A user's manager that creates its state on first use (the base class's contract)."""

    def _build_state(self):
        return {"scale_var": self._add_weight("loss_scale", 1024.0, tf.float32),
                "good_var": self._add_weight("good_steps", 0, tf.int32), "loss_scale": None}

    def get_loss_scale(self):
        return tf.convert_to_tensor(self._state()["scale_var"])

    def update_loss_scale(self, finite_grads):
        return tf.no_op()


def _lazy_values(manager):
    state = manager._state()   # pylint: disable=protected-access
    return [state["scale_var"].numpy().item(), state["good_var"].numpy().item()]


@pytest.mark.parametrize("child", ["loss_scale", "good_steps"])
def test_state_made_after_the_restore_is_restored_all_or_nothing(child, tmp_path):
    saved = _LazyManager()
    saved._state()["good_var"].assign(9)   # pylint: disable=protected-access
    saved._state()["scale_var"].assign(64.0)   # pylint: disable=protected-access
    good = tf.train.Checkpoint(obj=saved).write(str(tmp_path / "good"))
    key = "obj/%s%s" % (child, _SUFFIX)
    bad = _tamper(good, key, _wrong_shape(tf.train.load_checkpoint(good).get_tensor(key)),
                  str(tmp_path / "bad"))
    manager = _LazyManager()
    tf.train.Checkpoint(obj=manager).read(bad)          # nothing to restore into yet
    with pytest.raises(ValueError, match=r"_LazyManager: the checkpoint being restored holds "
                                         r"shape \(2,\) for %s" % child):
        manager.get_loss_scale()                         # the state is made, then restored
    assert _lazy_values(manager) == [1024.0, 0]
    later = _LazyManager()
    tf.train.Checkpoint(obj=later).read(good)
    assert _lazy_values(later) == [64.0, 9]


def test_a_saved_model_still_holds_the_state_variables(tmp_path):
    """The stand-ins are for checkpoints only: a SavedModel keeps the variables themselves."""
    root = tf.Module()
    root.scaler = nls.GradScaler(init_scale=64.0)
    root.manager = nls.ExponentialUpdateLossScaleManager(128.0, incr_every_n_steps=10)
    tf.saved_model.save(root, str(tmp_path / "model"))
    loaded = tf.saved_model.load(str(tmp_path / "model"))
    assert float(loaded.scaler._scale.numpy()) == 64.0   # pylint: disable=protected-access
    assert float(loaded.manager.loss_scale.numpy()) == 128.0
    assert int(loaded.manager.good_steps.numpy()) == 0


# -- under a tf.distribute strategy the variables are distributed ones, with their own savers ---
def _strategy():
    return tf.distribute.MirroredStrategy(["cpu:0"])


def test_under_a_strategy_a_managers_refused_restore_changes_nothing(tmp_path):
    with _strategy().scope():
        saved = _exponential(saved=True)
        manager = _exponential()
    good = tf.train.Checkpoint(obj=saved).write(str(tmp_path / "good"))
    key = "obj/loss_scale" + _SUFFIX
    bad = _tamper(good, key, _wrong_shape(tf.train.load_checkpoint(good).get_tensor(key)),
                  str(tmp_path / "bad"))
    with pytest.raises(ValueError, match=r"holds shape \(2,\) for loss_scale"):
        tf.train.Checkpoint(obj=manager).read(bad)
    assert _values(manager) == EXPONENTIAL_KEPT
    tf.train.Checkpoint(obj=manager).read(good)
    assert _values(manager) == {"loss_scale": 2.0 ** 20, "good_steps": 17, "bad_steps": 1}


@pytest.mark.skipif(KERAS3, reason=NO_LEGACY_REASON)
def test_under_a_strategy_the_keras2_loss_scale_state_is_restored_all_or_nothing(tmp_path):
    with _strategy().scope():
        saved = _keras2_optimizer(lambda: legacy_optimizers().SGD(0.1), saved=True)
        opt = _keras2_optimizer(lambda: legacy_optimizers().SGD(0.1))
    good = tf.train.Checkpoint(obj=saved).write(str(tmp_path / "good"))
    key = next(k for k in tf.train.load_checkpoint(good).get_variable_to_shape_map()
               if k.endswith("loss_scale/good_steps" + _SUFFIX))
    bad = _tamper(good, key, _wrong_shape(tf.train.load_checkpoint(good).get_tensor(key)),
                  str(tmp_path / "bad"))
    with pytest.raises(ValueError, match=r"holds shape \(2,\) for good_steps"):
        tf.train.Checkpoint(obj=opt).read(bad)
    assert _keras2_state(opt) == KERAS2_KEPT
    tf.train.Checkpoint(obj=opt).read(good)
    assert _keras2_state(opt) == {"current_loss_scale": 2.0 ** 20, "good_steps": 1,
                                  "last_step_finite": True}
