"""npu_loss_scale.keras.NpuLossScaleOptimizer: its scale at float32's ceiling, the state it reports
and restores, and Keras's behaviours it keeps (Keras 2 on TF 2.15, Keras 3 on TF 2.21).

The expected values are hand computations: powers of two, SGD's ``w - lr * g``.
"""
import re

import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale.keras import NpuLossScaleOptimizer
from keras_versions import (NO_JIT, NO_SPLIT_REASON, OPTIMIZER_V2_ONLY, legacy_optimizers,
                            optimizer_variables)
from keras_versions import custom_step as _step

KERAS3 = hasattr(tf.keras.optimizers, "LossScaleOptimizer")
NO_LEGACY = pytest.mark.skipif(KERAS3, reason="Keras 3 has no legacy (OptimizerV2) optimizers")
# The scale and counter variables as each Keras version names them.
SCALE_NAME, COUNTER_NAME = ("dynamic_scale", "step_counter") if KERAS3 else \
    ("current_loss_scale", "good_steps")


def _scale_variable(opt):
    return opt.dynamic_scale if KERAS3 else opt._loss_scale.current_loss_scale  # pylint: disable=protected-access


def _counter_variable(opt):
    return opt.step_counter if KERAS3 else opt.dynamic_counter


# -- the scale at float32's ceiling ---------------------------------------------------------------
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_growth_past_float32s_largest_power_of_two_holds_the_scale_and_training_goes_on(traced):
    """Growth every step from 2**126: 2**127, then a doubling would be inf: the scale stays
    2**127 (Keras 3's own class goes to inf and skips every later step). An overflow halves it
    to 2**126 and the next finite steps are applied."""
    var = tf.Variable([1.0, 2.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5), initial_scale=2.0 ** 126,
                                dynamic_growth_steps=1)
    clean = lambda: tf.reduce_sum(var) * 2.0 ** -127      # scaled loss stays finite  # noqa: E731
    bad = lambda: tf.reduce_sum(var) * np.float32(np.nan)  # noqa: E731
    step = tf.function(_step) if traced else _step
    step(opt, var, clean)
    assert float(opt.loss_scale) == 2.0 ** 127
    for _ in range(3):
        step(opt, var, clean)
        assert float(opt.loss_scale) == 2.0 ** 127 and bool(opt.last_step_finite.numpy())
    step(opt, var, bad)
    assert float(opt.loss_scale) == 2.0 ** 126 and not bool(opt.last_step_finite.numpy())
    before = var.numpy().copy()
    step(opt, var, lambda: tf.reduce_sum(var))             # gradient 1 per element
    assert bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == 2.0 ** 127
    assert var.numpy().tolist() == (before - 0.5).tolist()


# -- a fixed scale reports as Keras documents -----------------------------------------------------
@NO_LEGACY
def test_a_fixed_scale_has_no_dynamic_counter():
    """Keras 2's attribute, for both classes (around an optimizer and a legacy optimizer)."""
    families = {tf.keras.optimizers.SGD, legacy_optimizers().SGD}   # one family on Keras 2.6
    for inner in (family(0.1) for family in families):
        opt = NpuLossScaleOptimizer(inner, dynamic=False, initial_scale=2.0)
        assert opt.dynamic is False
        assert opt.dynamic_counter is None and opt.dynamic_growth_steps is None
        dynamic = NpuLossScaleOptimizer(type(inner)(0.1))
        assert isinstance(dynamic.dynamic_counter, tf.Variable)


@NO_LEGACY
def test_a_fixed_scale_is_readable_in_a_tf1_graph_before_initialisation():
    with tf.Graph().as_default():
        opt = NpuLossScaleOptimizer(legacy_optimizers().SGD(2.0), dynamic=False,
                                    initial_scale=10.0)
        with tf.compat.v1.Session() as sess:
            assert sess.run(opt.loss_scale) == 10.0           # no variable initialised yet
            var = tf.Variable([5.0])
            train = opt.minimize(lambda: var * 1.0, var_list=[var])
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            assert sess.run(var).tolist() == [3.0]            # 5 - 2 * 1


@NO_LEGACY
@pytest.mark.skipif(OPTIMIZER_V2_ONLY, reason=NO_SPLIT_REASON)
@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "fixed"])
def test_convert_to_legacy_optimizer_gives_the_legacy_class_with_the_same_settings(dynamic):
    import keras  # pylint: disable=import-outside-toplevel
    kwargs = dict(initial_scale=64.0, dynamic_growth_steps=3) if dynamic else \
        dict(dynamic=False, initial_scale=8.0)
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.25), **kwargs)
    converted = keras.__internal__.optimizers.convert_to_legacy_optimizer(opt)
    assert type(converted) is NpuLossScaleOptimizer._npu_legacy_class  # pylint: disable=protected-access
    assert isinstance(converted.inner_optimizer, tf.keras.optimizers.legacy.SGD)
    assert converted.inner_optimizer.get_config()["learning_rate"] == 0.25
    assert (converted.dynamic, converted.initial_scale, converted.dynamic_growth_steps) == \
        (dynamic, kwargs["initial_scale"], kwargs.get("dynamic_growth_steps"))


# -- a new global graph (clear_session, tf.test.TestCase) under a strategy ------------------------
def test_model_fit_under_a_mirrored_strategy_after_clear_session():
    """clear_session() replaces the global graph; a replica thread then builds the emulated
    register for the training function of the new one."""
    tf.keras.backend.clear_session()
    strategy = tf.distribute.MirroredStrategy(["cpu:0"])
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((2,)),
                                     tf.keras.layers.Dense(1, use_bias=False,
                                                           kernel_initializer="ones")])
        opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5), initial_scale=4.0)
        model.compile(optimizer=opt, loss="mae", **NO_JIT)
    x, y = np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    # mae of x @ [1, 1] = 2 > 0: the gradient of each kernel weight is 1; 1 - 0.5 * 1
    assert model.get_weights()[0].tolist() == [[0.5], [0.5]]
    assert bool(opt.last_step_finite.numpy())


# -- checkpoints holding an impossible state ------------------------------------------------------
BAD_STATES = [("scale", np.nan, "nan"), ("scale", np.inf, "inf"), ("scale", 0.0, "0"),
              ("scale", 0.5, "0.5"), ("counter", -1, "-1")]


def _trained(tmp_path, tamper=None):
    """A variable and an optimizer after one applied step, saved to a checkpoint (after
    ``tamper(opt)`` if given). Returns the checkpoint path."""
    var = tf.Variable([1.0, 2.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5, momentum=0.5), initial_scale=8.0,
                                dynamic_growth_steps=4)
    _step(opt, var, lambda: tf.reduce_sum(var))
    if tamper is not None:
        tamper(opt)
    return tf.train.Checkpoint(var=var, opt=opt).save(str(tmp_path / "ckpt"))


def _tamper(which, value):
    def tamper(opt):
        target = _scale_variable(opt) if which == "scale" else _counter_variable(opt)
        target.assign(tf.cast(value, target.dtype))
    return tamper


def _state(var, opt):
    """Everything a step changes: the weights, the optimizer's variables (slots, iterations,
    scale, counter, last verdict)."""
    own = [_scale_variable(opt), _counter_variable(opt), opt.last_step_finite]
    return [np.asarray(v.numpy()).tolist() for v in [var] + own + optimizer_variables(opt)]


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("which, value, shown", BAD_STATES,
                         ids=["scale-%s" % s if w == "scale" else "counter-%s" % s
                              for w, _, s in BAD_STATES])
def test_a_restored_impossible_state_is_refused_at_the_first_step_and_nothing_moves(
        tmp_path, which, value, shown, traced):
    path = _trained(tmp_path, _tamper(which, value))
    var = tf.Variable([1.0, 2.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5, momentum=0.5), initial_scale=8.0,
                                dynamic_growth_steps=4)
    _step(opt, var, lambda: tf.reduce_sum(var))             # builds the slots
    tf.train.Checkpoint(var=var, opt=opt).restore(path)
    before = _state(var, opt)
    step = tf.function(_step) if traced else _step
    name = SCALE_NAME if which == "scale" else COUNTER_NAME
    accepted = "a finite number >= 1" if which == "scale" else "an integer >= 0"
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        step(opt, var, lambda: tf.reduce_sum(var))
    message = " ".join(str(info.value).split())
    assert re.search(r"variable %s holds %s; accepted: %s" % (
        name, re.escape(shown), re.escape(accepted)), message), message[:2000]
    np.testing.assert_equal(_state(var, opt), before)     # NaN equals NaN here


def test_a_restored_valid_state_trains_on_from_it(tmp_path):
    """The counterpart: a checkpoint of a valid state restores and the next step continues from
    its scale and counter (scale 8 after one finite step of four: grows after three more)."""
    path = _trained(tmp_path)
    var = tf.Variable([0.0, 0.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5, momentum=0.5), initial_scale=2.0,
                                dynamic_growth_steps=4)
    _step(opt, var, lambda: tf.reduce_sum(var))
    tf.train.Checkpoint(var=var, opt=opt).restore(path)
    assert float(opt.loss_scale) == 8.0 and var.numpy().tolist() == [0.5, 1.5]
    for _ in range(3):
        _step(opt, var, lambda: tf.reduce_sum(var))
    assert float(opt.loss_scale) == 16.0


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_a_restore_into_a_fresh_optimizer_scales_its_first_step_by_the_restored_scale(
        tmp_path, traced):
    """A custom loop restoring into an optimizer that has not stepped yet (Keras 3 builds it at
    its first apply): the first step's loss is scaled by the restored scale 8, the scale its
    gradients are unscaled by. By hand, g = 1: momentum m = 0.5 * -0.5 - 0.5 * 1 = -0.75, so
    [0.5, 1.5] + m. Keras 3's own LossScaleOptimizer scales that step by initial_scale (1024
    here) and unscales by 8: its gradient is taken 128 times too large (m = -64.25)."""
    path = _trained(tmp_path)                 # scale 8, counter 1, [0.5, 1.5], m = -0.5
    var = tf.Variable([0.0, 0.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5, momentum=0.5), initial_scale=1024.0,
                                dynamic_growth_steps=4)
    tf.train.Checkpoint(var=var, opt=opt).restore(path)
    assert float(opt.loss_scale) == 8.0       # before the first step too
    step = tf.function(_step) if traced else _step
    step(opt, var, lambda: tf.reduce_sum(var))
    assert var.numpy().tolist() == [-0.25, 0.75]
    assert (float(opt.loss_scale), int(_counter_variable(opt).numpy())) == (8.0, 2)


def _compiled_model():
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), initial_scale=8.0)
    model.compile(optimizer=opt, loss="mse", **NO_JIT)
    return model, opt


def test_model_fit_refuses_a_restored_nan_scale_and_leaves_the_weights(tmp_path):
    """Through model.fit: Keras 2's model.save_weights keeps the optimizer; Keras 3's does not,
    there a tf.train.Checkpoint of model and optimizer is the way."""
    x, y = np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32)
    model, opt = _compiled_model()
    model.fit(x, y, verbose=0)
    _scale_variable(opt).assign(np.nan)
    path = str(tmp_path / "weights")
    if KERAS3:
        path = tf.train.Checkpoint(model=model, optimizer=opt).save(path)
    else:
        model.save_weights(path)
    model, opt = _compiled_model()
    model.fit(x, y, verbose=0)
    if KERAS3:
        tf.train.Checkpoint(model=model, optimizer=opt).restore(path)
    else:
        model.load_weights(path)
    weights = model.get_weights()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="loss scale variable %s holds nan; accepted" % SCALE_NAME):
        model.fit(x, y, verbose=0)
    for old, new in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(old, new)
