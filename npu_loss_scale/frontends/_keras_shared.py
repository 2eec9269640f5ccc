"""What both Keras versions' ``NpuLossScaleOptimizer`` classes
(:mod:`npu_loss_scale.frontends.keras`) share: the constructor's checks, Keras's growth/backoff rule, the refusal of an impossible state
restored from a checkpoint, the properties both report alike, and the registration with Keras's
serialization."""
import numpy as np
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal.report import StepReport
from npu_loss_scale.scaling import torch as torch_rule

__all__ = ["DEFAULT_INITIAL_SCALE", "DEFAULT_GROWTH_STEPS", "NpuProperties", "check_args",
           "keras_rule", "register", "state_check"]

DEFAULT_INITIAL_SCALE = 2.0 ** 15
DEFAULT_GROWTH_STEPS = 2000


def check_args(dynamic, initial_scale, dynamic_growth_steps):
    """(initial scale, growth steps) after checking the constructor's arguments, defaults filled."""
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


def keras_rule(scale, counter, finite, growth_steps, factor=2.0):
    """(scale, counter) after one step of Keras's growth/backoff rule: the torch family's
    :func:`npu_loss_scale.scaling.torch.next_state` with Keras's parameters (halve, never below
    1; double after ``growth_steps`` finite steps, or more, unless the doubled scale is infinite;
    ``factor=1``: a fixed scale whose counter still moves, Keras 2's ``dynamic=False``)."""
    return torch_rule.next_state(scale, counter, finite, growth_factor=factor,
                                 backoff_factor=1.0 / factor, growth_interval=growth_steps,
                                 min_scale=1.0, at_or_past=True)


_IMPOSSIBLE = ("NpuLossScaleOptimizer: the %s variable %s holds {}; accepted: %s (a restored "
               "checkpoint holds an impossible state: restore a valid one)")


def state_check(scale_name, scale, counter_name, counter):
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


class NpuProperties:
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
        :attr:`last_step_finite`) and ``next_loss_scale`` (the scale now, after that step's
        update). The scale the step itself used is not kept, so ``report.loss_scale`` is None.
        Read it eagerly, after a step."""
        finite = self.last_step_finite
        if finite is None:
            raise ValueError("the NpuLossScaleOptimizer has taken no step yet: its step_report "
                             "exists after the first apply_gradients")
        return StepReport(finite=bool(np.asarray(finite)),
                          next_loss_scale=np.asarray(self.loss_scale).item())


def register(cls):
    try:
        return tf.keras.utils.register_keras_serializable(package="npu_loss_scale")(cls)
    except (AttributeError, ValueError):  # pragma: no cover - registration is a convenience
        return cls
