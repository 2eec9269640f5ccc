"""``NpuLossScaleOptimizer`` on Keras 2 (:mod:`npu_loss_scale.frontends.keras` builds it on first
use): Keras's ``LossScaleOptimizer`` with Keras 2's dynamic loss-scale state deciding through the
package's detection; on TF 2.15 also the class around a legacy (``OptimizerV2``) optimizer and
Keras's conversion of one into the other; on TF 2.6 only that one."""
import threading

import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import staged as _staged
from npu_loss_scale._internal.compat import keras as compat_keras
from npu_loss_scale.detection.step import OverflowCheck
from npu_loss_scale.frontends._keras_shared import NpuProperties, check_args, keras_rule, \
    register, state_check
from npu_loss_scale.scaling.unscale import Reciprocal, unscale_gradient

__all__ = ["build"]


def build(doc, module):
    """The class, its docstring ``doc``, shown as defined in ``module`` (on TF 2.15 also the
    legacy class it builds around an ``OptimizerV2``)."""
    classes = compat_keras.keras2_classes()
    legacy_base = classes.legacy_loss_scale_optimizer     # Keras's, for OptimizerV2
    legacy_optimizer = classes.legacy_optimizer
    state_base = classes.dynamic_state

    class _NpuLossScaleState(_staged.StagedChildren, state_base):
        """Keras 2's dynamic loss-scale state, deciding with the package's detection.

        ``multiplier=1`` gives a fixed scale (``dynamic=False``) that still skips overflowed steps.
        """

        def __init__(self, initial_loss_scale, growth_steps, multiplier, check):
            super().__init__(initial_loss_scale, growth_steps, multiplier)
            self._npu_check = check
            self._last_step_finite = self._add_weight(name="last_step_finite", dtype=tf.bool,
                                                      initial_value=True)
            # A tf.train.Checkpoint restores the three all or nothing (_staged.StagedState).
            self._npu_staged = _staged.StagedState("NpuLossScaleOptimizer", {
                "current_loss_scale": self.current_loss_scale, "good_steps": self.counter,
                "last_step_finite": self._last_step_finite})

        def _staged_state(self):
            return self.__dict__.get("_npu_staged")

        def _replica_status(self, grads, step):
            # Keras 2 hands over unscaled gradients: the register, and inf/NaN in the values.
            in_register = step.end(step.read(grads))
            bad = step.count_nonfinite(grads)
            return tf.reshape(tf.cast(bad + in_register > 0, tf.float32), [1])

        def update(self, grads):
            # First of the step: a restored impossible scale or counter is refused.
            check = state_check("current_loss_scale", self.current_loss_scale, "good_steps",
                                 self.counter)
            grads = [g for g in tf.nest.flatten(grads) if g is not None]
            step = self._npu_check.start()
            if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():
                distribution = tf.distribute.get_strategy()
                per_replica = distribution.extended.call_for_each_replica(
                    self._replica_status, args=(grads, step))
                status = distribution.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            else:
                status = self._replica_status(grads, step)
            found = step.agree(tf.reshape(status, []))
            with tf.control_dependencies([check]):
                finite = tf.equal(found, 0.0)
            record = self._last_step_finite.assign(finite)
            with tf.control_dependencies([record]):
                finite = tf.identity(finite)
            scale, counter = self.current_loss_scale, self.counter
            new_scale, new_counter = keras_rule(scale, counter, finite, self.growth_steps,
                                                 self.multiplier)
            return tf.group(scale.assign(new_scale), counter.assign(new_counter)), finite

    class _Keras2(NpuProperties):
        """What the two Keras 2 classes share: the package's state in place of Keras's."""

        def _npu_init(self, lso_base, inner_optimizer, dynamic, initial_scale,
                      dynamic_growth_steps, backend, is_distributed, agreement):
            scale, steps = check_args(dynamic, initial_scale, dynamic_growth_steps)
            _checks.boolean("is_distributed", is_distributed)
            check = OverflowCheck(backend, is_distributed, agreement)
            lso_base.__init__(self, inner_optimizer, dynamic=False, initial_scale=scale)
            self._npu_dynamic = dynamic
            self._npu_check = check
            with tf.init_scope():
                self._loss_scale = _NpuLossScaleState(scale, steps, 2.0 if dynamic else 1.0,
                                                      check)
            self._track_trackable(self._loss_scale, "loss_scale", overwrite=True)

        def get_unscaled_gradients(self, grads):
            """Keras's, with the package's unscaling: exact at every scale, 2**127 included
            (Keras 2 multiplies by a reciprocal that flushes to zero above 2**126)."""
            # Keras's protocol: apply_gradients warns "You forgot to call
            # get_unscaled_gradients()" unless this flag, which Keras's own method sets, is set.
            self._gradients_have_been_unscaled = True
            reciprocal = Reciprocal.of(self.loss_scale)
            return [None if g is None else unscale_gradient(g, reciprocal) for g in grads]

        @property
        def initial_scale(self):
            return self._loss_scale.initial_loss_scale

        @property
        def dynamic_growth_steps(self):
            return self._loss_scale.growth_steps if self._npu_dynamic else None

        @property
        def dynamic_counter(self):
            """The count of finite steps since the last change of scale; None for a fixed scale
            (as Keras documents)."""
            return self._loss_scale.counter if self._npu_dynamic else None

        @property
        def loss_scale(self):
            """The current loss scale (float32 scalar); a fixed scale is a constant, readable in
            a TF1 graph before any variable is initialised (as Keras's)."""
            if not self._npu_dynamic:
                return tf.constant(self.initial_scale, tf.float32)
            return tf.convert_to_tensor(self._loss_scale.current_loss_scale)

        @property
        def last_step_finite(self):
            """bool variable: the latest step's gradients were all finite (so it was applied)."""
            return self._loss_scale._last_step_finite  # pylint: disable=protected-access

        def get_config(self):
            config = super().get_config()
            config.update(dynamic=self._npu_dynamic, initial_scale=self.initial_scale,
                          dynamic_growth_steps=self.dynamic_growth_steps)
            _conversion.legacy_class = getattr(type(self), "_npu_legacy_class", None)
            return config

    def legacy_class(name, doc, accepted):
        """The class around an ``OptimizerV2``, called ``name``; ``accepted`` says in errors
        which optimizers it takes."""

        class Legacy(_Keras2, legacy_base):  # pylint: disable=abstract-method
            __doc__ = doc

            def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                         dynamic_growth_steps=None, *, backend=None, is_distributed=False,
                         agreement=None):
                if not isinstance(inner_optimizer, legacy_optimizer):
                    raise TypeError("inner_optimizer must be %s; got %r (type %s)"
                                    % (accepted, inner_optimizer,
                                       type(inner_optimizer).__name__))
                self._npu_init(legacy_base, inner_optimizer, dynamic, initial_scale,
                               dynamic_growth_steps, backend, is_distributed, agreement)

        Legacy.__name__ = Legacy.__qualname__ = name
        Legacy.__module__ = module
        return Legacy

    if classes.loss_scale_optimizer is None:
        # Keras 2.6: OptimizerV2 is the only family, and Keras's LossScaleOptimizer the class
        # Ascend's TF2 adapter builds on.
        return legacy_class(
            "NpuLossScaleOptimizer", doc,
            "a Keras optimizer of tf.keras.optimizers (for example tf.keras.optimizers.Adam())")

    base = classes.loss_scale_optimizer
    NpuLegacyLossScaleOptimizer = legacy_class(  # pylint: disable=invalid-name
        "NpuLegacyLossScaleOptimizer",
        """``NpuLossScaleOptimizer`` around a legacy (``OptimizerV2``) Keras optimizer, what
        ``tf.keras.optimizers`` were up to TF 2.10 and ``tf.keras.optimizers.legacy`` (and
        TensorFlow Addons' optimizers) are since: built on Keras's ``LossScaleOptimizer`` for
        them, same arguments and behaviour. ``NpuLossScaleOptimizer(legacy_optimizer)`` gives
        one, and it is an instance of ``NpuLossScaleOptimizer``.""",
        "a legacy Keras optimizer (of tf.keras.optimizers.legacy)")

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
        __doc__ = doc

        def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                     dynamic_growth_steps=None, *, backend=None, is_distributed=False,
                     agreement=None):
            if not isinstance(inner_optimizer, classes.optimizer):
                raise TypeError("inner_optimizer must be a Keras optimizer of "
                                "tf.keras.optimizers (for example tf.keras.optimizers.Adam()) "
                                "or of tf.keras.optimizers.legacy; got %r (type %s)"
                                % (inner_optimizer, type(inner_optimizer).__name__))
            self._npu_init(base, inner_optimizer, dynamic, initial_scale, dynamic_growth_steps,
                           backend, is_distributed, agreement)

    NpuLossScaleOptimizer._npu_legacy_class = NpuLegacyLossScaleOptimizer  # pylint: disable=protected-access
    register(NpuLegacyLossScaleOptimizer)
    _register_legacy_conversion(NpuLegacyLossScaleOptimizer)
    NpuLossScaleOptimizer.__module__ = module
    return NpuLossScaleOptimizer


_conversion = threading.local()


class _LegacyConversion:
    """What Keras 2's ``convert_to_legacy_optimizer(optimizer)`` finds under the lower-cased
    class name (``npulossscaleoptimizer``, shared by this module's class and npu_device's).
    Keras takes the optimizer's config, then builds from it: the legacy class of the optimizer
    whose config was taken last in this thread, so npu_device's keeps its rank agreement."""

    default = None

    @classmethod
    def from_config(cls, config, custom_objects=None):
        legacy = getattr(_conversion, "legacy_class", None) or cls.default
        return legacy.from_config(config, custom_objects)


def _register_legacy_conversion(legacy_class):
    _LegacyConversion.default = legacy_class
    try:
        tf.keras.utils.get_custom_objects()["npulossscaleoptimizer"] = _LegacyConversion
    except AttributeError:  # pragma: no cover - a Keras without custom objects
        pass
