"""Megatron-LM's grad scalers as loss-scale managers.

``MegatronGradScaler``, ``ConstantGradScaler`` and ``DynamicGradScaler`` keep Megatron-Core's
names, arguments, rules and ``state_dict`` keys, and are also :class:`~npu_loss_scale.scaling.managers.
LossScaleManager` objects: pass one wherever a loss-scale manager goes
(:class:`~npu_loss_scale.NPULossScaleOptimizer`, TensorFlow's own
``MixedPrecisionLossScaleOptimizer``, :class:`~npu_loss_scale.MegatronMixedPrecisionOptimizer`).

Example::

    import npu_loss_scale as nls
    scaler = nls.DynamicGradScaler(initial_scale=2**32, min_scale=1.0, growth_factor=2.0,
                                   backoff_factor=0.5, growth_interval=1000, hysteresis=2)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(1e-4), scaler)
    train_op = opt.minimize(loss)

The two meanings of ``update``
------------------------------
Megatron's ``update(found_inf)`` takes a flag that is True when the step overflowed. TensorFlow's
``LossScale.update(grads)`` (which every manager inherits, and which TensorFlow's own optimizer
calls) takes the gradients and returns ``(update_op, should_apply)``. Here ``update`` accepts both:

* Megatron's ``found_inf`` (nonzero = the step overflowed): a Python bool, a Python int 0 or 1,
  a NumPy bool, integer or float scalar, or a bool or numeric tensor or array with exactly one element (such
  as Megatron's own float32 ``found_inf`` of shape ``[1]``);
* TensorFlow's gradients: a list, tuple or dict (any nested structure) of gradient tensors;
* anything else (a lone gradient tensor of several elements, a Python float, a string, None)
  is a ``TypeError`` naming ``found_inf`` and what is accepted.

The same dispatch (:mod:`npu_loss_scale.scaling.found_inf`) wraps the ``update`` of every
subclass, so a subclass that defines only Megatron's methods (``update(found_inf)``,
``state_dict()``, ``load_state_dict(state_dict)``) works with every optimizer; its ``update``
receives ``found_inf`` as a Python bool or a scalar bool tensor. NPULossScaleOptimizer itself calls ``update_loss_scale(finite)``, which is
``update(not finite)``.

Eager and graph mode
--------------------
In eager mode ``update(True)`` changes the variables at once (and returns None); in graph mode it
returns the op that does. ``scale`` and ``inv_scale`` are float32 scalar tensors.
``state_dict()`` returns plain Python numbers; in graph mode it and ``load_state_dict()`` run in
``session=`` (default: the default session). See :mod:`npu_loss_scale._internal.state_io`.
"""
import abc
import collections

import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import state_io as _state_io
from npu_loss_scale._internal.messages import LossScaleStuckWarning, warn_when_run
from npu_loss_scale.scaling.base import LOSS_SCALE_TENSOR_NAME, LossScaleManager
from npu_loss_scale.scaling.found_inf import dispatching_update, found_inf_flag
from npu_loss_scale.scaling.megatron_rule import dynamic_update

STUCK_MESSAGE = "npu_loss_scale: loss scale stuck at its minimum"


class MegatronGradScaler(LossScaleManager):
    """Abstract Megatron grad scaler: a float32 ``scale`` variable and Megatron's interface.

    Subclasses implement ``update(found_inf)``, ``state_dict()`` and ``load_state_dict(sd)``, as in
    Megatron-Core. ``found_inf`` reaches ``update`` as a Python bool (from a Python or NumPy
    bool or int, or a one-element array) or a scalar bool tensor (from a one-element bool or
    numeric tensor: nonzero = overflow); return the op that updates the state (or None in eager
    mode). The scale lives in :attr:`scale_variable`; assign to it to change the scale.

    Example (a scaler that halves on every overflow and never grows)::

        class HalvingScaler(nls.MegatronGradScaler):
            def update(self, found_inf):
                v = self.scale_variable
                return v.assign(where(found_inf, v * 0.5, v))
            def state_dict(self):
                return {}
            def load_state_dict(self, state_dict):
                pass

    Args:
      initial_scale: the starting scale, a real number > 0 (Megatron asserts the same) and at
        most float32 max.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        method = cls.__dict__.get("update")
        if method is not None and not getattr(method, "_npu_loss_scale_dispatch", False):
            cls.update = dispatching_update(method)

    def __init__(self, initial_scale):
        self._initial_scale = _checks.real_number(
            "initial_scale", initial_scale, minimum=0.0, min_inclusive=False,
            maximum=_checks.FLOAT32_MAX, accepted="> 0 and <= 3.4028235e38 (float32 max)")
        super().__init__()
        self._state()

    # -- state ------------------------------------------------------------------------------
    def _build_state(self):
        scale = self._add_weight("scale", self._initial_scale, tf.float32)
        fetchable = None if tf.executing_eagerly() else tf.identity(
            scale, name=LOSS_SCALE_TENSOR_NAME)
        return {"scale_var": scale, "loss_scale": fetchable}

    @property
    def scale_variable(self):
        """The float32 ``tf.Variable`` holding the scale (in the current graph)."""
        return self._state()["scale_var"]

    @property
    def variables(self):
        """This scaler's variables in the current graph: ``[scale]`` (subclasses add theirs)."""
        return [self._state()["scale_var"]]

    # -- Megatron interface -----------------------------------------------------------------
    @property
    def scale(self):
        """The current scale, a float32 scalar tensor."""
        return self.get_loss_scale()

    @property
    def inv_scale(self):
        """``1 / scale`` computed in float64 and rounded to float32 (as Megatron does).

        Above a scale of ``2**126`` it is a float32 subnormal, which CPU kernels flush to zero
        when it is used: to unscale, let the optimizer do it (it multiplies by two normal
        factors there, see :mod:`npu_loss_scale.scaling.unscale`) rather than multiplying by this.
        """
        scale64 = tf.cast(self.get_loss_scale(), tf.float64)
        return tf.cast(tf.math.reciprocal(scale64), tf.float32)

    @abc.abstractmethod
    def update(self, found_inf):  # pylint: disable=arguments-renamed
        """Megatron: moves the state given ``found_inf`` (nonzero = the step overflowed).

        ``found_inf`` is a Python bool, a Python int 0 or 1, a NumPy bool, integer or float
        scalar, or a bool or numeric tensor or array with exactly one element (Megatron's float32 ``found_inf`` of
        shape ``[1]`` included). A list, tuple or dict of gradient tensors is TensorFlow's
        ``LossScale.update(grads)`` instead, which returns ``(update_op, should_apply)``.
        Anything else raises ``TypeError`` naming ``found_inf`` and what is accepted.
        """

    @abc.abstractmethod
    def state_dict(self):
        """Megatron: the state to checkpoint, a dict."""

    @abc.abstractmethod
    def load_state_dict(self, state_dict):
        """Megatron: restores what :meth:`state_dict` returned."""

    def get_config(self):
        """TensorFlow's ``LossScale.get_config``; subclasses with more arguments extend it."""
        return {"initial_scale": self._initial_scale}

    # -- LossScaleManager interface ---------------------------------------------------------
    def get_loss_scale(self):
        return self._scale_of_variable()

    def update_loss_scale(self, finite_grads):
        finite = self._finite_flag(finite_grads)
        result = self.update(tf.logical_not(finite))
        # A subclass may return an op, a tensor, a variable's assign (an unread variable whose
        # .op is the assign), a list of those, or None (eager).
        ops = [r if isinstance(r, tf.Operation) else r.op
               for r in tf.nest.flatten(result)
               if isinstance(r, tf.Operation) or hasattr(r, "op")]
        if not ops:
            return tf.no_op(name="megatron_scaler_update")
        return tf.group(*ops, name="megatron_scaler_update")


# Mark the abstract base's own update so that __init_subclass__ never wraps it twice.
MegatronGradScaler.update._npu_loss_scale_dispatch = True  # pylint: disable=protected-access


class ConstantGradScaler(MegatronGradScaler):
    """A scale that never changes, whatever overflows (Megatron's ``ConstantGradScaler``).

    Overflowed steps are still skipped by :class:`~npu_loss_scale.NPULossScaleOptimizer` (Megatron
    skips them too). ``state_dict()`` is ``{}`` and ``load_state_dict`` ignores its argument, as
    in Megatron.

    Example::

        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(1e-4),
                                        nls.ConstantGradScaler(1024.0))
    """

    def update(self, found_inf):
        found_inf_flag(found_inf)
        if tf.executing_eagerly():
            return None
        return tf.no_op(name="constant_grad_scaler_update")

    def state_dict(self, session=None):  # pylint: disable=unused-argument
        return {}

    def load_state_dict(self, state_dict, session=None):  # pylint: disable=unused-argument
        if not isinstance(state_dict, dict):
            raise TypeError("ConstantGradScaler.load_state_dict() takes a dict; got %r (type %s)"
                            % (state_dict, type(state_dict).__name__))

    def __repr__(self):
        return "ConstantGradScaler(initial_scale=%r)" % self._initial_scale


class DynamicGradScaler(MegatronGradScaler):
    """Megatron's dynamic grad scaler, with hysteresis, on TensorFlow variables.

    State: ``scale`` (float32), ``growth_tracker`` and ``hysteresis_tracker`` (int32), plus
    ``min_scale_overflow_steps`` (int32, not part of ``state_dict``). Each ``update(found_inf)``::

        if found_inf:                              # the step overflowed
            growth_tracker = 0
            hysteresis_tracker -= 1
            if hysteresis_tracker <= 0:
                scale = max(scale * backoff_factor, min_scale)
        else:
            growth_tracker += 1
            if consecutive_hysteresis:
                hysteresis_tracker = hysteresis
            if growth_tracker >= growth_interval:
                growth_tracker = 0
                hysteresis_tracker = hysteresis
                scale = min(scale * growth_factor, max_scale)

    all in float32. Hysteresis is *cumulative* (Megatron's code, whatever its docstring says about
    NaNs "in a row"): a finite step does not refill it, only a growth does; once it is spent,
    every further overflow backs off, and ``hysteresis_tracker`` keeps going down below zero
    (``state_dict`` shows it). ``consecutive_hysteresis=True`` gives DeepSpeed's variant instead:
    every finite step refills it, so only overflows in a row count.

    Differences from Megatron, all opt-in or invisible in Megatron's reachable states:
    ``max_scale`` caps growth (default: float32 max, so growth never produces an inf where
    Megatron's float32 tensor would become inf); growth fires at ``growth_tracker >=
    growth_interval`` (Megatron: ``==``; the same unless a loaded state holds a larger tracker).

    When an overflowed step finds the scale already at ``min_scale``, scaling cannot help any
    more: by default a warning is printed (stderr) and training goes on skipping. With
    ``max_overflows_at_min_scale=N`` the N-th such step in a row fails instead with
    ``tf.errors.InvalidArgumentError`` whose message starts with :data:`STUCK_MESSAGE` (in eager
    mode it is raised by ``update``; in graph mode by ``session.run`` of the train op).

    Example (Megatron's defaults for ``--fp16`` with ``--loss-scale`` unset)::

        scaler = nls.DynamicGradScaler(initial_scale=2**32, min_scale=1.0, growth_factor=2.0,
                                       backoff_factor=0.5, growth_interval=1000, hysteresis=2)

    Args:
      initial_scale: starting scale, > 0 and <= float32 max.
      min_scale: lower bound of the scale, > 0 and <= initial_scale.
      growth_factor: > 1.
      backoff_factor: in the open interval (0, 1).
      growth_interval: finite steps in a row before growing, integer >= 1.
      hysteresis: overflows tolerated before backing off, integer >= 1.
      max_scale: optional upper bound of the scale, >= initial_scale (default float32 max).
      consecutive_hysteresis: DeepSpeed's variant (default False: Megatron's).
      max_overflows_at_min_scale: optional integer >= 1, see above (default None: warn only).
    """

    # update() warns itself when stuck at min_scale; NPULossScaleOptimizer then does not.
    warns_when_stuck = True

    def __init__(self, initial_scale, min_scale, growth_factor, backoff_factor, growth_interval,
                 hysteresis, *, max_scale=None, consecutive_hysteresis=False,
                 max_overflows_at_min_scale=None):
        initial = _checks.real_number(
            "initial_scale", initial_scale, minimum=0.0, min_inclusive=False,
            maximum=_checks.FLOAT32_MAX, accepted="> 0 and <= 3.4028235e38 (float32 max)")
        self._min_scale = _checks.real_number(
            "min_scale", min_scale, minimum=0.0, min_inclusive=False, maximum=initial,
            accepted="> 0 and <= initial_scale (%r)" % initial)
        self._growth_factor = _checks.real_number("growth_factor", growth_factor, minimum=1.0,
                                                  min_inclusive=False, accepted="> 1")
        self._backoff_factor = _checks.real_number(
            "backoff_factor", backoff_factor, minimum=0.0, min_inclusive=False, maximum=1.0,
            max_inclusive=False, accepted="in the open interval (0, 1)")
        self._growth_interval = _checks.positive_int("growth_interval", growth_interval)
        self._hysteresis = _checks.positive_int("hysteresis", hysteresis)
        if max_scale is None:
            self._max_scale = None
        else:
            self._max_scale = _checks.real_number(
                "max_scale", max_scale, minimum=initial, maximum=_checks.FLOAT32_MAX,
                accepted=">= initial_scale (%r) and <= 3.4028235e38 (float32 max), or None"
                % initial)
        self._consecutive = _checks.boolean("consecutive_hysteresis", consecutive_hysteresis)
        if max_overflows_at_min_scale is not None:
            max_overflows_at_min_scale = _checks.positive_int("max_overflows_at_min_scale",
                                                              max_overflows_at_min_scale)
        self._max_at_min = max_overflows_at_min_scale
        super().__init__(initial)

    @property
    def min_scale(self):
        return self._min_scale

    @property
    def growth_factor(self):
        return self._growth_factor

    @property
    def backoff_factor(self):
        return self._backoff_factor

    @property
    def growth_interval(self):
        return self._growth_interval

    @property
    def hysteresis(self):
        return self._hysteresis

    @property
    def max_scale(self):
        """The cap of growth; None means float32 max."""
        return self._max_scale

    def _state_limits(self):
        top = _checks.FLOAT32_MAX if self._max_scale is None else self._max_scale
        return {"scale": (self._min_scale, True, top,
                          "a finite number >= min_scale (%r) and <= %s" % (
                              self._min_scale, "3.4028235e38 (float32 max)"
                              if self._max_scale is None else "max_scale (%r)" % top))}

    def _build_state(self):
        state = super()._build_state()
        state["growth_var"] = self._add_weight("growth_tracker", 0, tf.int32)
        state["hysteresis_var"] = self._add_weight("hysteresis_tracker", self._hysteresis,
                                                   tf.int32)
        state["at_min_var"] = self._add_weight("min_scale_overflow_steps", 0, tf.int32)
        return state

    def _state_variables(self):
        s = self._state()
        return collections.OrderedDict([("scale", s["scale_var"]),
                                        ("growth_tracker", s["growth_var"]),
                                        ("hysteresis_tracker", s["hysteresis_var"])])

    @property
    def variables(self):
        """``[scale, growth_tracker, hysteresis_tracker, min_scale_overflow_steps]`` here."""
        s = self._state()
        return [s["scale_var"], s["growth_var"], s["hysteresis_var"], s["at_min_var"]]

    def update(self, found_inf):
        overflow = found_inf_flag(found_inf)
        s = self._state()
        scale = tf.convert_to_tensor(s["scale_var"])
        growth = tf.convert_to_tensor(s["growth_var"])
        hyst = tf.convert_to_tensor(s["hysteresis_var"])
        at_min = tf.convert_to_tensor(s["at_min_var"])
        with tf.name_scope("megatron_scaler_update"):
            new_scale, new_growth, new_hyst, new_at_min, stuck_now = dynamic_update(
                overflow, scale, growth, hyst, at_min, min_scale=self._min_scale,
                ceiling=self._max_scale if self._max_scale is not None else _checks.FLOAT32_MAX,
                growth_factor=self._growth_factor, backoff_factor=self._backoff_factor,
                growth_interval=self._growth_interval, hysteresis=self._hysteresis,
                consecutive=self._consecutive)
            assigns = [s["scale_var"].assign(new_scale), s["growth_var"].assign(new_growth),
                       s["hysteresis_var"].assign(new_hyst), s["at_min_var"].assign(new_at_min)]
            with tf.control_dependencies(assigns):
                check = self._stuck_check(stuck_now, new_at_min, scale)
            op = tf.group(*assigns, check, name="assign")
        return None if tf.executing_eagerly() else op

    def _stuck_check(self, stuck_now, count, scale):
        def warn():
            return warn_when_run(
                LossScaleStuckWarning, "npu_loss_scale: gradients overflowed at the minimum "
                "loss scale %g (%d such steps in a row); the step is skipped. Set "
                "max_overflows_at_min_scale to stop instead.", [scale, count],
                name="warn_stuck_at_min_scale")

        warned = tf.cond(stuck_now, warn, lambda: tf.constant(False))
        if self._max_at_min is None:
            return warned
        return tf.debugging.Assert(
            count < self._max_at_min,
            [STUCK_MESSAGE + ": the last", count, "steps in a row overflowed at loss scale",
             scale, "= min_scale; stopping as max_overflows_at_min_scale = %d asks. The model "
             "itself overflows: check its fp16 ranges or the learning rate." % self._max_at_min,
             warned], summarize=8, name="stuck_at_min_scale")

    def state_dict(self, session=None):
        """``{"scale": float, "growth_tracker": int, "hysteresis_tracker": int}`` (Megatron's keys).

        In graph mode the values are read with ``session`` (default: the default session).
        """
        return _state_io.read(self, self._state_variables, session)

    def load_state_dict(self, state_dict, session=None):
        """Assigns the three values of a :meth:`state_dict` (all three keys required)."""
        _state_io.write(self, self._state_variables, state_dict, session, self._state_limits())

    def get_config(self):
        return {"initial_scale": self._initial_scale, "min_scale": self._min_scale,
                "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "hysteresis": self._hysteresis,
                "max_scale": self._max_scale, "consecutive_hysteresis": self._consecutive,
                "max_overflows_at_min_scale": self._max_at_min}

    def __repr__(self):
        return "DynamicGradScaler(%s)" % ", ".join("%s=%r" % kv for kv in self.get_config().items())


__all__ = ["MegatronGradScaler", "ConstantGradScaler", "DynamicGradScaler", "STUCK_MESSAGE"]
