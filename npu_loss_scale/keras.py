"""Ascend's Keras ``NpuLossScaleOptimizer`` (TF2 adapter) for Keras 2 (TF 2.15) and Keras 3.

``NpuLossScaleOptimizer(inner_optimizer, dynamic=True, initial_scale=None,
dynamic_growth_steps=None)`` is Keras's own loss-scale optimizer with Ascend's overflow
detection: the float-status register (read after the gradients exist, cleared after the read;
its CPU emulation off the device) in saturation mode, where an overflowed value is ±65504 and
``is_finite`` cannot see it, OR-ed with an inf/NaN check of the gradients; plain inf/NaN in
INF/NaN mode or with ``backend="inf_nan"``. With ``is_distributed=True`` the overflow flag is
summed over ranks (:mod:`npu_loss_scale.agreement`, one collective per step) so every rank skips
the same steps. Under a ``tf.distribute`` strategy the flag is first summed over the replicas
(each device has its own register), so an overflow on any replica skips the step everywhere.

What one step does:

* finite step: the inner optimizer applies the unscaled gradients once; with ``dynamic=True``
  the scale doubles after ``dynamic_growth_steps`` finite steps in a row;
* overflowed step: nothing is applied, the scale halves (never below 1) and the count restarts.
  ``dynamic=False``: the scale stays ``initial_scale`` (required), and overflowed steps are
  still skipped (Ascend checks whatever the scale policy).
* ``last_step_finite``: a bool variable, the verdict of the latest step.
* ``iterations`` follows the Keras version: Keras 2 counts skipped steps too, Keras 3 only
  applied ones.

Keras 2 (TF 2.15): ``inner_optimizer`` may also be a legacy one (``OptimizerV2``:
``tf.keras.optimizers.legacy.*``, TensorFlow Addons' optimizers, the ``tf.keras.optimizers`` of
TF 2.4 that the adapter's scripts subclass); the optimizer is then built on Keras's
``LossScaleOptimizer`` for those (class ``NpuLegacyLossScaleOptimizer``, an instance of
``NpuLossScaleOptimizer``), with the same arguments and steps, as Keras's own
``LossScaleOptimizer(optimizer)`` picks its class from the optimizer's kind.

The class is built on first use from the Keras in ``tf.keras`` (Keras 2's
``LossScaleOptimizerV3`` on TF 2.15, ``keras.optimizers.LossScaleOptimizer`` on Keras 3), so
importing :mod:`npu_loss_scale` does not import Keras. Keras 3 ``model.fit`` with the emulated
register needs ``jit_compile=False`` (the register is a hash table, which XLA cannot compile).

Example::

    import tensorflow as tf
    from npu_loss_scale.keras import NpuLossScaleOptimizer

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    model.fit(tf.ones([8, 4]), tf.zeros([8, 1]), epochs=1, verbose=0)
    tf.keras.mixed_precision.set_global_policy("float32")
    print(bool(opt.last_step_finite.numpy()))   # True
"""
import sys

import tensorflow as tf

from . import _checks
from ._compat.ops import where
from .frontends._overflow import OverflowCheck

DEFAULT_INITIAL_SCALE = 2.0 ** 15
DEFAULT_GROWTH_STEPS = 2000

_built = {}


def _check_args(dynamic, initial_scale, dynamic_growth_steps):
    _checks.boolean("dynamic", dynamic)
    if not dynamic:
        if initial_scale is None:
            raise ValueError("initial_scale must be given when dynamic is False (the fixed loss "
                             "scale); got None")
        if dynamic_growth_steps is not None:
            raise ValueError("dynamic_growth_steps must be None when dynamic is False; got %r"
                             % (dynamic_growth_steps,))
    if initial_scale is None:
        initial_scale = DEFAULT_INITIAL_SCALE
    initial_scale = _checks.real_number("initial_scale", initial_scale, minimum=1.0,
                                        accepted=">= 1")
    if dynamic_growth_steps is None:
        dynamic_growth_steps = DEFAULT_GROWTH_STEPS
    dynamic_growth_steps = _checks.positive_int("dynamic_growth_steps", dynamic_growth_steps)
    return initial_scale, dynamic_growth_steps


class _NpuProperties:
    """What both Keras versions' optimizers report the same way."""

    @property
    def dynamic(self):
        """Whether the scale moves (``dynamic=True``) or stays at ``initial_scale``."""
        return self._npu_dynamic

    @property
    def backend_name(self):
        """The overflow detection backend in use: ``npu``, ``emulation`` or ``inf_nan``."""
        return self._npu_check.backend_name


def _keras3():
    return hasattr(tf.keras.optimizers, "LossScaleOptimizer")


# -- Keras 3 --------------------------------------------------------------------------------------
def _build_keras3():
    base = tf.keras.optimizers.LossScaleOptimizer
    keras_ops = sys.modules[base.__module__].ops

    class NpuLossScaleOptimizer(_NpuProperties, base):  # pylint: disable=abstract-method
        __doc__ = __doc__

        def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                     dynamic_growth_steps=None, *, backend=None, is_distributed=False,
                     agreement=None, name=None, **kwargs):
            if not isinstance(inner_optimizer, tf.keras.optimizers.Optimizer):
                raise TypeError("inner_optimizer must be a Keras optimizer (for example "
                                "tf.keras.optimizers.Adam()); got %r (type %s)"
                                % (inner_optimizer, type(inner_optimizer).__name__))
            scale, steps = _check_args(dynamic, initial_scale, dynamic_growth_steps)
            _checks.boolean("is_distributed", is_distributed)
            super().__init__(inner_optimizer, initial_scale=scale, dynamic_growth_steps=steps,
                             name=name, **kwargs)
            self._npu_dynamic = dynamic
            if not dynamic:
                self.dynamic_growth_steps = None   # as Keras 2 reports a fixed scale
            self._npu_check = OverflowCheck(backend, is_distributed, agreement)
            self.last_step_finite = None

        def build(self, var_list):
            self.last_step_finite = self.add_variable(
                shape=(), dtype="bool", initializer="ones", aggregation="none",
                name="last_step_finite")
            super().build(var_list)

        @property
        def loss_scale(self):
            """The current loss scale (float32 scalar)."""
            if not self.built:
                return tf.constant(self.initial_scale, tf.float32)
            return tf.convert_to_tensor(self.dynamic_scale.value)

        def check_finite(self, grads):
            # Keras 3 checks the still-scaled gradients: the emulation's ±MAX test applies too.
            register = self._npu_check.read_and_clear_register(
                [g for g in grads if g is not None])
            _, bad = self._npu_check.check_and_unscale(list(grads), tf.constant(1.0))
            found = tf.cast(bad + register > 0, tf.float32)
            # Under a tf.distribute strategy Keras calls this once per replica and keeps the
            # first replica's answer; each replica (device) has its own register, so the flag is
            # summed over the replicas first, then over ranks.
            if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
                found = tf.distribute.get_replica_context().all_reduce(
                    tf.distribute.ReduceOp.SUM, found)
            found = self._npu_check.agree(found)
            finite = tf.equal(found, 0.0)
            self.last_step_finite.assign(finite)
            return finite

        def _stateful_handle_finite_grads(self, grads, trainable_variables):
            if self._npu_dynamic:
                return super()._stateful_handle_finite_grads(grads, trainable_variables)
            scale = self.dynamic_scale
            unscaled = [g if g is None else keras_ops.divide(g, scale) for g in grads]
            self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)
            return None

        def _stateful_handle_non_finite_grads(self):
            self.step_counter.assign(0)
            if self._npu_dynamic:
                self.dynamic_scale.assign(
                    keras_ops.maximum(keras_ops.multiply(self.dynamic_scale, 0.5), 1.0))

        def get_config(self):
            config = super().get_config()
            config["dynamic"] = self._npu_dynamic
            return config

    NpuLossScaleOptimizer.__module__ = __name__
    return NpuLossScaleOptimizer


# -- Keras 2 --------------------------------------------------------------------------------------
def _build_keras2():
    lso_module = sys.modules[tf.keras.mixed_precision.LossScaleOptimizer.__module__]
    base = lso_module.LossScaleOptimizerV3
    legacy_base = lso_module.LossScaleOptimizer          # Keras's, for OptimizerV2
    legacy_optimizer = lso_module.optimizer_v2.OptimizerV2
    state_base = lso_module._DynamicLossScaleState  # pylint: disable=protected-access

    class _NpuLossScaleState(state_base):
        """Keras 2's dynamic loss-scale state, deciding with the package's detection.

        ``multiplier=1`` gives a fixed scale (``dynamic=False``) that still skips overflowed steps.
        """

        def __init__(self, initial_loss_scale, growth_steps, multiplier, check):
            super().__init__(initial_loss_scale, growth_steps, multiplier)
            self._npu_check = check
            self._last_step_finite = self._add_weight(name="last_step_finite", dtype=tf.bool,
                                                      initial_value=True)

        def _replica_status(self, grads):
            # Keras 2 hands over unscaled gradients: the register, and inf/NaN in the values.
            register = self._npu_check.read_and_clear_register(grads)
            bad = self._npu_check.count_bad(grads)
            return tf.reshape(tf.cast(bad + register > 0, tf.float32), [1])

        def update(self, grads):
            grads = [g for g in tf.nest.flatten(grads) if g is not None]
            if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():
                distribution = tf.distribute.get_strategy()
                per_replica = distribution.extended.call_for_each_replica(
                    self._replica_status, args=(grads,))
                status = distribution.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            else:
                status = self._replica_status(grads)
            found = self._npu_check.agree(tf.reshape(status, []))
            finite = tf.equal(found, 0.0)
            record = self._last_step_finite.assign(finite)
            with tf.control_dependencies([record]):
                finite = tf.identity(finite)
            scale, counter = self.current_loss_scale, self.counter

            def on_finite():
                def grow():
                    new = scale * self.multiplier
                    return tf.group(scale.assign(where(tf.math.is_finite(new), new, scale)),
                                    counter.assign(0))
                return tf.cond(counter + 1 >= self.growth_steps, grow,
                               lambda: tf.group(counter.assign_add(1)))

            def on_overflow():
                return tf.group(counter.assign(0),
                                scale.assign(tf.maximum(scale / self.multiplier, 1.0)))

            return tf.cond(finite, on_finite, on_overflow), finite

    class _Keras2(_NpuProperties):
        """What the two Keras 2 classes share: the package's state in place of Keras's."""

        def _npu_init(self, lso_base, inner_optimizer, dynamic, initial_scale,
                      dynamic_growth_steps, backend, is_distributed, agreement):
            scale, steps = _check_args(dynamic, initial_scale, dynamic_growth_steps)
            _checks.boolean("is_distributed", is_distributed)
            check = OverflowCheck(backend, is_distributed, agreement)
            lso_base.__init__(self, inner_optimizer, dynamic=False, initial_scale=scale)
            self._npu_dynamic = dynamic
            self._npu_check = check
            with tf.init_scope():
                self._loss_scale = _NpuLossScaleState(scale, steps, 2.0 if dynamic else 1.0,
                                                      check)
            self._track_trackable(self._loss_scale, "loss_scale", overwrite=True)

        @property
        def initial_scale(self):
            return self._loss_scale.initial_loss_scale

        @property
        def dynamic_growth_steps(self):
            return self._loss_scale.growth_steps if self._npu_dynamic else None

        @property
        def dynamic_counter(self):
            return self._loss_scale.counter

        @property
        def last_step_finite(self):
            """bool variable: the latest step's gradients were all finite (so it was applied)."""
            return self._loss_scale._last_step_finite  # pylint: disable=protected-access

        def get_config(self):
            config = super().get_config()
            config.update(dynamic=self._npu_dynamic, initial_scale=self.initial_scale,
                          dynamic_growth_steps=self.dynamic_growth_steps)
            return config

    class NpuLegacyLossScaleOptimizer(_Keras2, legacy_base):  # pylint: disable=abstract-method
        """``NpuLossScaleOptimizer`` around a legacy (``OptimizerV2``) Keras optimizer, what
        ``tf.keras.optimizers`` were up to TF 2.10 and ``tf.keras.optimizers.legacy`` (and
        TensorFlow Addons' optimizers) are since: built on Keras's ``LossScaleOptimizer`` for
        them, same arguments and behaviour. ``NpuLossScaleOptimizer(legacy_optimizer)`` gives
        one, and it is an instance of ``NpuLossScaleOptimizer``."""

        def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                     dynamic_growth_steps=None, *, backend=None, is_distributed=False,
                     agreement=None):
            if not isinstance(inner_optimizer, legacy_optimizer):
                raise TypeError("inner_optimizer must be a legacy Keras optimizer (of "
                                "tf.keras.optimizers.legacy); got %r (type %s)"
                                % (inner_optimizer, type(inner_optimizer).__name__))
            self._npu_init(legacy_base, inner_optimizer, dynamic, initial_scale,
                           dynamic_growth_steps, backend, is_distributed, agreement)

    class _Dispatch(type(base)):
        """``NpuLossScaleOptimizer(legacy_optimizer)`` builds the legacy class (as Keras's
        ``LossScaleOptimizer`` does), which counts as an ``NpuLossScaleOptimizer``."""

        def __call__(cls, inner_optimizer, *args, **kwargs):
            if isinstance(inner_optimizer, legacy_optimizer):
                return cls._npu_legacy_class(inner_optimizer, *args, **kwargs)
            return super().__call__(inner_optimizer, *args, **kwargs)

        def __instancecheck__(cls, instance):
            return super().__instancecheck__(instance) or \
                isinstance(instance, cls._npu_legacy_class)

    class NpuLossScaleOptimizer(_Keras2, base, metaclass=_Dispatch):  # pylint: disable=abstract-method
        __doc__ = __doc__

        def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                     dynamic_growth_steps=None, *, backend=None, is_distributed=False,
                     agreement=None):
            if not isinstance(inner_optimizer, tf.keras.optimizers.Optimizer):
                raise TypeError("inner_optimizer must be a Keras optimizer of "
                                "tf.keras.optimizers (for example tf.keras.optimizers.Adam()) "
                                "or of tf.keras.optimizers.legacy; got %r (type %s)"
                                % (inner_optimizer, type(inner_optimizer).__name__))
            self._npu_init(base, inner_optimizer, dynamic, initial_scale, dynamic_growth_steps,
                           backend, is_distributed, agreement)

    NpuLossScaleOptimizer._npu_legacy_class = NpuLegacyLossScaleOptimizer  # pylint: disable=protected-access
    NpuLegacyLossScaleOptimizer.__module__ = __name__
    _register(NpuLegacyLossScaleOptimizer)
    NpuLossScaleOptimizer.__module__ = __name__
    return NpuLossScaleOptimizer


def _register(cls):
    try:
        return tf.keras.utils.register_keras_serializable(package="npu_loss_scale")(cls)
    except (AttributeError, ValueError):  # pragma: no cover - registration is a convenience
        return cls


def __getattr__(name):
    if name == "NpuLossScaleOptimizer":
        if name not in _built:
            _built[name] = _register(_build_keras3() if _keras3() else _build_keras2())
        return _built[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["NpuLossScaleOptimizer", "DEFAULT_INITIAL_SCALE", "DEFAULT_GROWTH_STEPS"]
