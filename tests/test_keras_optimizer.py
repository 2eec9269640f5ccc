"""npu_loss_scale.keras.NpuLossScaleOptimizer on Keras 2 (TF 2.6, 2.15) and Keras 3 (TF 2.21)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale import agreement
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import saturation
from npu_loss_scale.keras import NpuLossScaleOptimizer

from keras_versions import (KERAS3, LEGACY_CLASS_NAME, LEGACY_OPTIMIZERS, NO_JIT,
                            NO_LEGACY_REASON, OPTIMIZER_V2_ONLY, legacy_optimizers)
from keras_versions import custom_step as _custom_step


@pytest.fixture
def mixed_float16():
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    tf.keras.mixed_precision.set_global_policy("float32")


def _saturating_loss(var, mult):
    def loss():
        y = emulation.saturate(tf.cast(var * mult, tf.float16))
        return tf.reduce_sum(tf.cast(y, tf.float32))
    return loss


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_custom_loop_applies_once_skips_saturated_overflow_and_sets_last_step_finite(traced):
    var = tf.Variable([1.0, 2.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5), initial_scale=8.0,
                                dynamic_growth_steps=2)
    emulation.npu_clear_float_status_v2()

    def step(mult):
        _custom_step(opt, var, _saturating_loss(var, mult))

    run = tf.function(step) if traced else step
    run(tf.constant(1.0))
    # Applied exactly once: w - lr * 1 (Ascend's TF2 adapter once applied twice: w - 2 lr).
    assert var.numpy().tolist() == [0.5, 1.5]
    assert bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == 8.0
    run(tf.constant(1e5))              # forward saturates to 65504: finite values, register set
    assert var.numpy().tolist() == [0.5, 1.5]
    assert not bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == 4.0
    run(tf.constant(1.0))
    run(tf.constant(1.0))
    assert float(opt.loss_scale) == 8.0      # doubled after 2 finite steps in a row
    assert var.numpy().tolist() == [-0.5, 0.5]


@pytest.mark.skipif(KERAS3, reason=NO_LEGACY_REASON)
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_a_legacy_inner_optimizer_gets_the_legacy_class_with_the_same_steps(traced):
    """TF 2.4-era optimizers (OptimizerV2: ``tf.keras.optimizers.legacy``, TensorFlow Addons'
    LAMB; ``tf.keras.optimizers`` on TF 2.6) are what the adapter's NpuLossScaleOptimizer
    wraps; they get Keras's LossScaleOptimizer for OptimizerV2 with the package's detection."""
    var = tf.Variable([1.0, 2.0])
    opt = NpuLossScaleOptimizer(legacy_optimizers().SGD(0.5), initial_scale=8.0,
                                dynamic_growth_steps=2)
    assert type(opt).__name__ == LEGACY_CLASS_NAME
    assert isinstance(opt, NpuLossScaleOptimizer)
    assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
    emulation.npu_clear_float_status_v2()

    def step(mult):
        _custom_step(opt, var, _saturating_loss(var, mult))

    run = tf.function(step) if traced else step
    run(tf.constant(1.0))
    assert var.numpy().tolist() == [0.5, 1.5]
    assert bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == 8.0
    run(tf.constant(1e5))              # saturated forward: register set, step skipped
    assert var.numpy().tolist() == [0.5, 1.5]
    assert not bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == 4.0
    run(tf.constant(1.0))
    run(tf.constant(1.0))
    assert float(opt.loss_scale) == 8.0
    assert var.numpy().tolist() == [-0.5, 0.5]
    # Keras 2 counts the skipped step too, as Ascend's TF2 adapter does on TF 2.6
    assert int(opt.iterations.numpy()) == 4
    assert float(opt._optimizer._decayed_lr("float32")) == 0.5  # pylint: disable=protected-access


@pytest.mark.skipif(KERAS3, reason=NO_LEGACY_REASON)
def test_a_legacy_inner_optimizer_with_a_fixed_scale_and_its_config():
    var = tf.Variable([1.0])
    opt = NpuLossScaleOptimizer(legacy_optimizers().SGD(0.1), dynamic=False,
                                initial_scale=64.0)
    assert opt.dynamic is False and opt.dynamic_growth_steps is None
    _custom_step(opt, var, lambda: tf.reduce_sum(var) * np.inf)
    assert var.numpy().tolist() == [1.0] and float(opt.loss_scale) == 64.0
    _custom_step(opt, var, lambda: tf.reduce_sum(var))
    np.testing.assert_allclose(var.numpy(), [0.9], rtol=1e-6)
    again = type(opt).from_config(opt.get_config())
    assert type(again) is type(opt)
    assert (again.dynamic, again.initial_scale, again.dynamic_growth_steps) == (False, 64.0, None)
    with pytest.raises(ValueError, match="initial_scale must be given"):
        NpuLossScaleOptimizer(legacy_optimizers().SGD(0.1), dynamic=False)


def test_scale_halves_on_overflow_but_never_below_one():
    var = tf.Variable([1.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), initial_scale=2.0)
    for _ in range(3):
        _custom_step(opt, var, lambda: tf.reduce_sum(var) * np.inf)
    assert float(opt.loss_scale) == 1.0 and var.numpy().tolist() == [1.0]


def test_fixed_scale_keeps_the_scale_and_still_skips_overflowed_steps():
    var = tf.Variable([1.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), dynamic=False, initial_scale=64.0)
    assert opt.dynamic is False and opt.dynamic_growth_steps is None
    _custom_step(opt, var, lambda: tf.reduce_sum(var) * np.inf)
    assert var.numpy().tolist() == [1.0] and float(opt.loss_scale) == 64.0
    for _ in range(3):
        _custom_step(opt, var, lambda: tf.reduce_sum(var))
    np.testing.assert_allclose(var.numpy(), [0.7], rtol=1e-6)
    assert float(opt.loss_scale) == 64.0


@pytest.mark.parametrize("kwargs, error, text", [
    ({"dynamic": False}, ValueError, "initial_scale must be given when dynamic is False"),
    ({"dynamic": "yes"}, TypeError, "dynamic must be True or False"),
    ({"initial_scale": 0.5}, ValueError, "initial_scale must be >= 1; got 0.5"),
    ({"dynamic_growth_steps": 0}, ValueError, "dynamic_growth_steps must be an integer >= 1"),
    ({"backend": "cuda"}, ValueError, "backend must be one of"),
])
def test_bad_arguments_name_argument_value_and_accepted(kwargs, error, text):
    with pytest.raises(error, match=text):
        NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), **kwargs)


def _model():
    inputs = tf.keras.Input((4,))
    h = tf.keras.layers.Dense(3, kernel_initializer="ones")(inputs)
    h = saturation.Saturate()(h)
    outputs = tf.keras.layers.Dense(1, dtype="float32", kernel_initializer="ones")(h)
    return tf.keras.Model(inputs, outputs)


@pytest.mark.slow
def test_model_fit_mixed_float16_skips_saturated_step_and_checkpoint_round_trips(
        mixed_float16, tmp_path):  # pylint: disable=redefined-outer-name,unused-argument
    model = _model()
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.001), initial_scale=8.0,
                                dynamic_growth_steps=3)
    model.compile(optimizer=opt, loss="mse", **NO_JIT)
    x, y = np.ones((8, 4), np.float32), np.zeros((8, 1), np.float32)
    emulation.npu_clear_float_status_v2()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == 8.0
    before = [v.numpy().copy() for v in model.trainable_variables]
    model.fit(x * 1e5, y, batch_size=8, epochs=1, verbose=0)   # Dense output saturates
    assert not bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == 4.0
    for old, var in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(old, var.numpy())
    path = tf.train.Checkpoint(optimizer=opt, model=model).save(str(tmp_path / "ckpt"))

    other_model = _model()
    other = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.001), initial_scale=8.0,
                                  dynamic_growth_steps=3)
    other_model.compile(optimizer=other, loss="mse", **NO_JIT)
    other_model.fit(x, y, batch_size=8, epochs=1, verbose=0)          # builds the slots
    tf.train.Checkpoint(optimizer=other, model=other_model).restore(path)
    assert float(other.loss_scale) == 4.0 and not bool(other.last_step_finite.numpy())
    for var, restored in zip(model.trainable_variables, other_model.trainable_variables):
        np.testing.assert_array_equal(var.numpy(), restored.numpy())


class OtherRankOverflowed(agreement.Agreement):
    """Stands in for the collective: another rank reports an overflow."""

    name = "fake"

    def reduce(self, status):
        return status + 1.0


def test_overflow_on_another_rank_makes_every_rank_skip():
    var = tf.Variable([1.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), initial_scale=4.0,
                                is_distributed=True, agreement=OtherRankOverflowed())
    _custom_step(opt, var, lambda: tf.reduce_sum(var))
    assert var.numpy().tolist() == [1.0] and float(opt.loss_scale) == 2.0
    assert not bool(opt.last_step_finite.numpy())


def test_inf_nan_backend_misses_what_the_register_sees():
    var = tf.Variable([1.0, 2.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5), initial_scale=1.0,
                                backend="inf_nan")
    assert opt.backend_name == "inf_nan"
    _custom_step(opt, var, _saturating_loss(var, tf.constant(1e5)))
    assert var.numpy().tolist() == [1.0 - 0.5e5, 2.0 - 0.5e5]
    emulation.npu_clear_float_status_v2()


@pytest.mark.slow
def test_importing_the_package_does_not_import_keras_or_datasets():
    code = ("import sys, tensorflow; before = set(sys.modules); import npu_loss_scale; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "print(sorted(new & {'keras', 'tf_keras', 'sklearn', 'mlxtend'}))")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env).stdout.strip().splitlines()
    assert out[-1] == "[]"


def test_model_fit_under_a_mirrored_strategy_skips_the_saturated_step(mixed_float16):  # pylint: disable=redefined-outer-name,unused-argument
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = _model()
        opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.001), initial_scale=8.0)
        model.compile(optimizer=opt, loss="mse", **NO_JIT)
    x, y = np.ones((8, 4), np.float32), np.zeros((8, 1), np.float32)
    emulation.npu_clear_float_status_v2()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == 8.0
    before = model.get_weights()
    model.fit(x * 1e5, y, batch_size=8, epochs=1, verbose=0)
    assert not bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == 4.0
    for old, new in zip(before, model.get_weights()):
        np.testing.assert_array_equal(old, new)


@pytest.mark.parametrize("kwargs", [{"initial_scale": 256.0, "dynamic_growth_steps": 7},
                                    {"dynamic": False, "initial_scale": 64.0}])
def test_config_round_trip(kwargs):
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), **kwargs)
    again = type(opt).from_config(opt.get_config())
    assert type(again) is type(opt)
    assert (again.dynamic, again.initial_scale, again.dynamic_growth_steps) == \
        (opt.dynamic, opt.initial_scale, opt.dynamic_growth_steps)
    assert again.dynamic is kwargs.get("dynamic", True)


def test_a_non_keras_inner_optimizer_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="inner_optimizer must be a Keras optimizer.*"
                                        "GradientDescentOptimizer"):
        NpuLossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))


def test_reachable_as_an_attribute_of_the_package():
    import npu_loss_scale  # pylint: disable=import-outside-toplevel
    assert npu_loss_scale.keras.NpuLossScaleOptimizer is NpuLossScaleOptimizer


_TWO_REPLICAS = r'''
import numpy as np, tensorflow as tf
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
from npu_loss_scale import emulation, saturation
from npu_loss_scale.keras import NpuLossScaleOptimizer
tf.keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3),
                                 saturation.Saturate(),
                                 tf.keras.layers.Dense(1, dtype="float32")])
    opt = NpuLossScaleOptimizer(INNER(0.001), initial_scale=8.0)
    model.compile(optimizer=opt, loss="mse"COMPILE)
x, y = np.ones((8, 4), np.float32), np.zeros((8, 1), np.float32)
emulation.npu_clear_float_status_v2()
model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
print("RESULT", "clean", bool(opt.last_step_finite.numpy()), float(opt.loss_scale))
for name, half in [("second", np.concatenate([x[:4], x[4:] * 1e5])),
                   ("first", np.concatenate([x[:4] * 1e5, x[4:]]))]:
    before = model.get_weights()
    model.fit(half, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    same = all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    print("RESULT", name, bool(opt.last_step_finite.numpy()), float(opt.loss_scale), same)
'''


@pytest.mark.parametrize("inner", ["tf.keras.optimizers.SGD"] + ([] if OPTIMIZER_V2_ONLY else [
    pytest.param(LEGACY_OPTIMIZERS + ".SGD", marks=pytest.mark.skipif(
        KERAS3, reason=NO_LEGACY_REASON))]))
@pytest.mark.slow
def test_an_overflow_on_the_second_replica_only_skips_the_step(inner):
    # Two logical CPUs must be configured before TensorFlow initialises its devices: a fresh
    # process. Each replica has its own register; only the second one's half saturates first.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p))
    script = _TWO_REPLICAS.replace("INNER", inner).replace(
        "COMPILE", "".join(", %s=%r" % item for item in NO_JIT.items()))
    out = subprocess.run([sys.executable, "-c", script],
                         capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    results = [line.split()[1:] for line in out.stdout.splitlines()
               if line.startswith("RESULT")]
    assert results == [["clean", "True", "8.0"],
                       ["second", "False", "4.0", "True"],
                       ["first", "False", "2.0", "True"]]


def test_the_loss_scale_optimizer_has_the_adapters_shape_and_counts_skipped_steps(npu_shim):  # pylint: disable=unused-argument
    """npu_device's NpuLossScaleOptimizer as Ascend's TF2 adapter has it on TF 2.6: positional
    (inner, dynamic, initial_scale, dynamic_growth_steps), Keras's LossScaleOptimizer underneath,
    last_step_finite, and a skipped step that still advances ``iterations`` (Keras 2; the TF1
    adapter's skipped step leaves global_step alone: test_optimizer.py). Keras 3 counts only
    applied steps."""
    import npu_device as npu  # pylint: disable=import-outside-toplevel
    from npu_device.train.optimizer import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    npu.open().as_default()
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5), True, 8.0, 2)
    assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
    assert (opt.dynamic, opt.initial_scale, opt.dynamic_growth_steps) == (True, 8.0, 2)
    weight = tf.Variable([1.0])

    @tf.function
    def step(grad):
        if KERAS3:
            opt.apply_gradients([(grad * opt.loss_scale, weight)])
        else:
            opt.apply_gradients([(grad, weight)])

    seen = []
    for grad in ([1.0], [np.inf], [1.0], [1.0]):
        step(tf.constant(grad))
        seen.append((weight.numpy().tolist(), bool(opt.last_step_finite.numpy()),
                     float(opt.loss_scale), int(opt.iterations.numpy())))
    # by hand: w - 0.5 * 1 per applied step; the scale halves on the skipped step, doubles
    # after 2 finite steps in a row
    counted = [1, 2, 3, 4] if not KERAS3 else [1, 1, 2, 3]
    assert seen == [([0.5], True, 8.0, counted[0]), ([0.5], False, 4.0, counted[1]),
                    ([0.0], True, 4.0, counted[2]), ([-0.5], True, 8.0, counted[3])]
