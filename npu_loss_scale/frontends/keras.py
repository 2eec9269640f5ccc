"""Ascend's Keras ``NpuLossScaleOptimizer`` (TF2 adapter) for Keras 2 (TF 2.6, 2.15) and Keras 3.

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
  the scale doubles after ``dynamic_growth_steps`` finite steps in a row, unless the doubled
  scale would be infinite: it then stays (at most 2**127). That is Keras 2's rule, kept on
  Keras 3 too, whose own class doubles to inf and then skips every step for ever;
* overflowed step: nothing is applied, the scale halves (never below 1) and the count restarts.
  ``dynamic=False``: the scale stays ``initial_scale`` (required), and overflowed steps are
  still skipped (Ascend checks whatever the scale policy).
* ``last_step_finite``: a bool variable, the verdict of the latest step.
* a loss scale that is not a finite number >= 1, or a negative growth counter (what a restored
  checkpoint can hold; the constructor refuses such values), fails the next step before any of
  it runs, with an ``InvalidArgumentError`` naming the variable, its value and what is accepted.
* ``iterations`` follows the Keras version: Keras 2 counts skipped steps too (as the TF2
  adapter does on TF 2.6), Keras 3 only applied ones.

Keras 2 (TF 2.15): ``inner_optimizer`` may also be a legacy one (``OptimizerV2``:
``tf.keras.optimizers.legacy.*``, TensorFlow Addons' optimizers, the ``tf.keras.optimizers`` of
TF 2.4 that the adapter's scripts subclass); the optimizer is then built on Keras's
``LossScaleOptimizer`` for those (class ``NpuLegacyLossScaleOptimizer``, an instance of
``NpuLossScaleOptimizer``), with the same arguments and steps, as Keras's own
``LossScaleOptimizer(optimizer)`` picks its class from the optimizer's kind.

Keras 2.6 (TF 2.6.5, the TensorFlow of Ascend's TF2 adapter): ``tf.keras.optimizers`` are
``OptimizerV2`` ones, and the class is built on Keras's ``LossScaleOptimizer`` for them, as the
adapter's is.

The class is built on first use from the Keras in ``tf.keras`` (Keras's ``LossScaleOptimizer``
on TF 2.6, Keras 2's ``LossScaleOptimizerV3`` on TF 2.15, ``keras.optimizers.LossScaleOptimizer``
on Keras 3; :mod:`npu_loss_scale._internal.compat.keras`), so
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
import threading

import numpy as np
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import staged as _staged
from npu_loss_scale._internal.compat import keras as compat_keras
from npu_loss_scale._internal.report import StepReport
from npu_loss_scale.scaling import torch as torch_rule
from npu_loss_scale.scaling.unscale import Reciprocal, unscale_gradient
from npu_loss_scale.detection.step import OverflowCheck

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


def _keras_rule(scale, counter, finite, growth_steps, factor=2.0):
    """(scale, counter) after one step of Keras's growth/backoff rule: the torch family's
    :func:`npu_loss_scale.scaling.torch.next_state` with Keras's parameters (halve, never below
    1; double after ``growth_steps`` finite steps, or more, unless the doubled scale is infinite;
    ``factor=1``: a fixed scale whose counter still moves, Keras 2's ``dynamic=False``)."""
    return torch_rule.next_state(scale, counter, finite, growth_factor=factor,
                                 backoff_factor=1.0 / factor, growth_interval=growth_steps,
                                 min_scale=1.0, at_or_past=True)


_IMPOSSIBLE = ("NpuLossScaleOptimizer: the %s variable %s holds {}; accepted: %s (a restored "
               "checkpoint holds an impossible state: restore a valid one)")


def _state_check(scale_name, scale, counter_name, counter):
    """An op that fails, naming the variable, its value and what is accepted, when the loss
    scale is not a finite number >= 1 or the growth counter is negative: what only a restored
    checkpoint (or a direct assignment) can put there. Made first in a step, so that nothing of
    the step runs when it fails (eagerly it raises at once)."""
    scale = tf.convert_to_tensor(scale)
    counter = tf.convert_to_tensor(counter)
    return tf.group(
        _refuse_unless(tf.logical_and(tf.math.is_finite(scale), scale >= 1.0),
                       _IMPOSSIBLE % ("loss scale", scale_name, "a finite number >= 1"), scale),
        _refuse_unless(counter >= 0,
                       _IMPOSSIBLE % ("growth counter", counter_name, "an integer >= 0"),
                       counter))


def _refuse_unless(ok, template, value):
    """InvalidArgumentError with ``template`` formatted with ``value`` unless ``ok`` (an op in
    a graph, at once eagerly)."""
    message = tf.strings.format(template, value)
    if tf.executing_eagerly():
        if not bool(ok):
            raise tf.errors.InvalidArgumentError(None, None, message.numpy().decode())
        return tf.no_op()
    return tf.debugging.Assert(ok, [message])


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

    @property
    def step_report(self):
        """The latest step's :class:`~npu_loss_scale.StepReport`: ``finite`` (the value of
        :attr:`last_step_finite`) and ``loss_scale`` (the scale now, after that step's update).
        Read it eagerly, after a step."""
        finite = self.last_step_finite
        if finite is None:
            raise ValueError("the NpuLossScaleOptimizer has taken no step yet: its step_report "
                             "exists after the first apply_gradients")
        return StepReport(finite=bool(np.asarray(finite)),
                          loss_scale=np.asarray(self.loss_scale).item())


# -- Keras 3 --------------------------------------------------------------------------------------
#: Keras 3's loss-scale state: Keras's scale and counter, and the package's verdict.
_KERAS3_STATE = ("dynamic_scale", "step_counter", "last_step_finite")
#: Their shapes and dtypes (Keras 3's "int" is int64 on TensorFlow).
_KERAS3_ACCEPTED = {"dynamic_scale": ((), "float32"), "step_counter": ((), "int64"),
                    "last_step_finite": ((), "bool")}


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
            # Set outside Keras's tracking: neither is a checkpoint child of its own.
            self.__dict__["_npu_staged"] = None
            self.__dict__["_npu_variables_list"] = _staged.StagedList(
                lambda: self._variables, lambda: self.__dict__.get("_npu_staged"),
                before_lookup=self._npu_refuse_pending)

        def build(self, var_list):
            self._npu_refuse_pending()
            self.__dict__["_npu_building"] = True
            try:
                self.last_step_finite = self.add_variable(
                    shape=(), dtype="bool", initializer="ones", aggregation="none",
                    name="last_step_finite")
                super().build(var_list)
            finally:
                self.__dict__["_npu_building"] = False
            self._npu_stage_state()

        # -- tf.train.Checkpoint restores of the loss-scale state, all or nothing ------------
        # Keras tracks each of its optimizer variables twice: by name and as an entry of
        # `_variables`. Both references lead to one stand-in per state variable (one checkpoint
        # key, restored once into the staging of _staged.StagedState), so a refused value
        # leaves all three as they were.
        def _npu_refuse_pending(self):
            """A checkpoint read before the build and holding a value that does not fit is
            refused before anything is made: when the restore reaches the list of variables
            (so ``read`` raises), else when the optimizer is built (``model.fit`` builds it
            inside its first traced step)."""
            if self.built:
                return
            _staged.refuse_pending(
                "NpuLossScaleOptimizer",
                [(self, {name: name for name in _KERAS3_STATE}),
                 (self.__dict__["_npu_variables_list"], {})], _KERAS3_ACCEPTED)

        def _npu_stage_state(self):
            """After the build: the staging of the three variables, and what a checkpoint read
            before the build holds for them restored into it."""
            tracked = {name: getattr(self, name) for name in _KERAS3_STATE}
            values = {name: getattr(var, "_value", None) for name, var in tracked.items()}
            listing = self.__dict__["_npu_variables_list"]
            if any(value is None for value in values.values()):
                # not initialized yet (Keras defers it in a stateless scope): restored as Keras
                # restores it, one variable at a time
                for name, var in tracked.items():
                    self._handle_deferred_dependencies(name, var)
            else:
                staged = _staged.StagedState("NpuLossScaleOptimizer", values, tracked)
                self.__dict__["_npu_staged"] = staged
                staged.restore_deferred([(self, {name: name for name in _KERAS3_STATE}),
                                         (listing, listing.state_indices())])
            listing.restore_deferred_entries()

        def _handle_deferred_dependencies(self, name, trackable):
            if name in _KERAS3_STATE and self.__dict__.get("_npu_building"):
                return   # restored once all three exist, by _npu_stage_state
            super()._handle_deferred_dependencies(name, trackable)

        def _trackable_children(self, save_type="checkpoint", **kwargs):
            children = dict(super()._trackable_children(save_type, **kwargs))
            staged = self.__dict__.get("_npu_staged")
            if save_type == "checkpoint" and staged is not None:
                children.update(staged.children)
                children["_variables"] = self.__dict__["_npu_variables_list"]
            return children

        def _lookup_dependency(self, name, cached_dependencies=None):
            if name == "_variables" and "_npu_variables_list" in self.__dict__:
                return self.__dict__["_npu_variables_list"]
            staged = self.__dict__.get("_npu_staged")
            if staged is not None and name in staged.children:
                staged.expect(name, getattr(self, "_self_update_uid", None))
                return staged.children[name]
            return super()._lookup_dependency(name, cached_dependencies)

        @property
        def loss_scale(self):
            """The current loss scale (float32 scalar)."""
            if not self.built:
                return tf.constant(self.initial_scale, tf.float32)
            return tf.convert_to_tensor(self.dynamic_scale.value)

        def check_finite(self, grads):
            # Keras 3 checks the still-scaled gradients: the emulation's ±MAX test applies too.
            # First of the step: a restored impossible scale or counter is refused.
            check = _state_check("dynamic_scale", self.dynamic_scale, "step_counter",
                                 self.step_counter)
            step = self._npu_check.start()
            register = step.end(step.read([g for g in grads if g is not None]))
            bad = step.count_overflowed(list(grads))
            found = tf.cast(bad + register > 0, tf.float32)
            # Under a tf.distribute strategy Keras calls this once per replica and keeps the
            # first replica's answer; each replica (device) has its own register, so the flag is
            # summed over the replicas first, then over ranks.
            if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
                found = tf.distribute.get_replica_context().all_reduce(
                    tf.distribute.ReduceOp.SUM, found)
            found = step.agree(found)
            with tf.control_dependencies([check]):
                finite = tf.equal(found, 0.0)
            self.last_step_finite.assign(finite)
            return finite

        def _stateful_handle_finite_grads(self, grads, trainable_variables):
            scale = self.dynamic_scale
            variables = trainable_variables or self._trainable_variables
            as_is = getattr(self, "_overwrite_variable_with_gradient", lambda variable: False)
            unscaled = [g if g is None or as_is(v) else keras_ops.divide(g, scale)
                        for g, v in zip(grads, variables)]
            self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)
            if self._npu_dynamic:
                self._count_finite_step()

        def _count_finite_step(self):
            """One finite step of Keras's rule (:func:`_keras_rule`): a growth held at the
            largest finite scale (Keras 3's own class doubles it to inf, then skips every step
            for ever); a counter at or past the growth point grows too."""
            scale, count = _keras_rule(self.dynamic_scale, self.step_counter, True,
                                       self.dynamic_growth_steps)
            self.dynamic_scale.assign(scale)
            self.step_counter.assign(count)

        def _stateful_handle_non_finite_grads(self):
            if not self._npu_dynamic:
                self.step_counter.assign(0)     # a fixed scale: only the count restarts
                return
            scale, count = _keras_rule(self.dynamic_scale, self.step_counter, False,
                                       self.dynamic_growth_steps)
            self.dynamic_scale.assign(scale)
            self.step_counter.assign(count)

        def get_config(self):
            config = super().get_config()
            config["dynamic"] = self._npu_dynamic
            return config

    NpuLossScaleOptimizer.__module__ = __name__
    return NpuLossScaleOptimizer


# -- Keras 2 --------------------------------------------------------------------------------------
def _build_keras2():
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
            register = step.end(step.read(grads))
            bad = step.count_nonfinite(grads)
            return tf.reshape(tf.cast(bad + register > 0, tf.float32), [1])

        def update(self, grads):
            # First of the step: a restored impossible scale or counter is refused.
            check = _state_check("current_loss_scale", self.current_loss_scale, "good_steps",
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
            new_scale, new_counter = _keras_rule(scale, counter, finite, self.growth_steps,
                                                 self.multiplier)
            return tf.group(scale.assign(new_scale), counter.assign(new_counter)), finite

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

        def get_unscaled_gradients(self, grads):
            """Keras's, with the package's unscaling: exact at every scale, 2**127 included
            (Keras 2 multiplies by a reciprocal that flushes to zero above 2**126)."""
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
        Legacy.__module__ = __name__
        return Legacy

    if classes.loss_scale_optimizer is None:
        # Keras 2.6: OptimizerV2 is the only family, and Keras's LossScaleOptimizer the class
        # Ascend's TF2 adapter builds on.
        return legacy_class(
            "NpuLossScaleOptimizer", __doc__,
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
        __doc__ = __doc__

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
    _register(NpuLegacyLossScaleOptimizer)
    _register_legacy_conversion(NpuLegacyLossScaleOptimizer)
    NpuLossScaleOptimizer.__module__ = __name__
    return NpuLossScaleOptimizer


def _register(cls):
    try:
        return tf.keras.utils.register_keras_serializable(package="npu_loss_scale")(cls)
    except (AttributeError, ValueError):  # pragma: no cover - registration is a convenience
        return cls


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


def __getattr__(name):
    if name == "NpuLossScaleOptimizer":
        if not compat_keras.has_loss_scale_optimizer():
            raise ImportError(
                "npu_loss_scale.keras.NpuLossScaleOptimizer is built on Keras's LossScaleOptimizer, "
                "which this TensorFlow (%s) does not have (TensorFlow 2.4 and later do); in TF1 "
                "Keras, compile the model with optimizer=NPULossScaleOptimizer(...) instead "
                "(docs/guides/keras.md)" % tf.__version__, name="npu_loss_scale.keras")
        if name not in _built:
            build = _build_keras3 if compat_keras.is_keras3() else _build_keras2
            _built[name] = _register(build())
        return _built[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["NpuLossScaleOptimizer", "DEFAULT_INITIAL_SCALE", "DEFAULT_GROWTH_STEPS"]
