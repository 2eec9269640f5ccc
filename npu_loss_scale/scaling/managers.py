"""Loss-scale managers: the rules that move the loss scale, and nothing else.

A manager owns a few non-trainable variables and exposes two calls:

* ``get_loss_scale()`` — the current scale as a float32 scalar tensor;
* ``update_loss_scale(finite_grads)`` — an op that moves the scale given a boolean that says
  whether the step's gradients were all finite.

Managers know nothing about overflow detection, devices or optimizers;
:class:`~npu_loss_scale.NPULossScaleOptimizer` calls ``update_loss_scale`` once per step.
TensorFlow's own ``MixedPrecisionLossScaleOptimizer`` never updates a manager it is given: use
ours. (On TensorFlow 1.15, ``tf.contrib.mixed_precision.LossScaleOptimizer``, the class ours
subclasses there, follows the same two-call contract and does update one.)

State lives once per outermost graph (the ``tf.compat.v1`` graph, or eager execution for
``tf.function``s), created the first time the manager is used there, outside any control
dependency, cond or loop body, and held by that graph: a manager never keeps a graph alive.

Checkpoints: the variables carry Ascend's names. In a ``tf.compat.v1`` graph a plain name-based
``tf.compat.v1.train.Saver`` saves and restores them under the keys ``loss_scale``,
``good_steps`` and ``bad_steps`` (``loss_scale_1``... for a second manager in the graph), so a
checkpoint written on the device restores here and the other way round, with no ``var_list``
map; ``loss_scale:0`` evaluates to the float32 scale. Object-based ``tf.train.Checkpoint``
tracks the same names and restores them all or nothing (see
:class:`npu_loss_scale._internal.staged.StagedState`). The arithmetic is that of the Ascend adapter,
in float32; :mod:`npu_loss_scale.scaling.reference.ascend` holds a pure-Python twin of each rule that the
tests replay step for step.
"""
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import state_io as _state_io
from npu_loss_scale._internal.compat.ops import where
from npu_loss_scale.scaling.base import LOSS_SCALE_TENSOR_NAME, LossScaleManager, as_manager


# Ascend's managers grow the scale only while it is below 3.4e38 / incr_ratio (in float32), so
# that growing never gives an inf. (The reference twin states the same fact on its own.)
_GROWTH_CEILING = 3.4e38


class FixedLossScaleManager(LossScaleManager):
    """A loss scale that never changes.

    Args:
      loss_scale: the scale, a real number >= 1.
      enable_overflow_check: if True (the default), :class:`NPULossScaleOptimizer` still reads
        the overflow status every step and skips the update when anything overflowed (Ascend's
        behaviour; TensorFlow's own optimizer never checks a fixed scale). If False, no status is
        read and every step is applied.

    Example::

        mgr = FixedLossScaleManager(loss_scale=1024)
        opt = NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), mgr)
    """

    def __init__(self, loss_scale, enable_overflow_check=True):
        super().__init__()
        self._value = _checks.real_number("loss_scale", loss_scale, minimum=1.0,
                                          maximum=_checks.FLOAT32_MAX)
        self._enable_overflow_check = _checks.boolean("enable_overflow_check",
                                                      enable_overflow_check)
        self._state()

    def _build_state(self):
        return {"loss_scale": tf.constant(self._value, tf.float32, name=LOSS_SCALE_TENSOR_NAME)}

    def get_loss_scale(self):
        return self._state()["loss_scale"]

    def update_loss_scale(self, finite_grads):
        self._finite_flag(finite_grads)
        return tf.no_op(name="fixed_loss_scale_update")

    def next_loss_scale(self, finite_grads):
        self._finite_flag(finite_grads)
        return self.get_loss_scale()

    def get_enable_overflow_check(self):
        return self._enable_overflow_check

    def get_config(self):
        return {"loss_scale": self._value, "enable_overflow_check": self._enable_overflow_check}

    def __repr__(self):
        return "FixedLossScaleManager(loss_scale=%r, enable_overflow_check=%r)" % (
            self._value, self._enable_overflow_check)

    # -- state_dict (issue 10): a fixed scale has no state, like Megatron's ConstantGradScaler --
    def state_dict(self, session=None):  # pylint: disable=unused-argument
        """``{}``: nothing changes, nothing to save (the scale is a constructor argument)."""
        return {}

    def load_state_dict(self, state_dict, session=None):  # pylint: disable=unused-argument
        """Accepts only the ``{}`` of :meth:`state_dict`.

        A non-empty dict (say, the state of a dynamic manager) would be silently lost here, so it
        raises instead: a fixed scale is set by the constructor.
        """
        if not isinstance(state_dict, dict):
            raise TypeError("FixedLossScaleManager.load_state_dict() takes a dict; got %r (type "
                            "%s)" % (state_dict, type(state_dict).__name__))
        if state_dict:
            raise ValueError("state_dict of a FixedLossScaleManager must be {} (a fixed scale has "
                             "no state; set it with FixedLossScaleManager(loss_scale=...)); got "
                             "keys %s" % sorted(state_dict))


class ExponentialUpdateLossScaleManager(LossScaleManager):
    """Grows the scale after a run of finite steps and shrinks it after overflows (Ascend rules).

    State: ``loss_scale`` (float32), ``good_steps`` and ``bad_steps`` (int32), all
    non-trainable variables saved with the model under Ascend's names (see the module
    docstring). Each ``update_loss_scale(finite)``:

    * finite step: if ``good_steps + 1 >= incr_every_n_steps`` then
      ``loss_scale *= incr_ratio`` (only while ``loss_scale < 3.4e38 / incr_ratio``, so it never
      becomes inf) and both counters reset to 0; else ``good_steps += 1`` — ``bad_steps`` is kept.
    * overflowed step: if ``bad_steps + 1 >= decr_every_n_nan_or_inf`` then
      ``loss_scale = max(1, loss_scale * decr_ratio)`` and both counters reset; else
      ``bad_steps += 1`` and ``good_steps = 0``.

    So growth needs ``incr_every_n_steps`` *consecutive* finite steps, while overflows count
    towards a decrease even when finite steps come between them; the scale never goes below 1.
    At a scale of 1 an overflow can no longer be cured by scaling and steps go on being skipped:
    :class:`NPULossScaleOptimizer` logs a warning when that happens.

    Example (the Ascend BERT defaults)::

        mgr = ExponentialUpdateLossScaleManager(init_loss_scale=2**32, incr_every_n_steps=1000,
                                                decr_every_n_nan_or_inf=2, decr_ratio=0.5)

    Args:
      init_loss_scale: starting scale, a real number >= 1 and <= float32 max.
      incr_every_n_steps: consecutive finite steps before growing, integer >= 1.
      decr_every_n_nan_or_inf: overflowed steps before shrinking, integer >= 1 (default 2).
      incr_ratio: growth factor, > 1 (default 2).
      decr_ratio: shrink factor, in (0, 1) (default 0.8).
    """

    def __init__(self, init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf=2,
                 incr_ratio=2, decr_ratio=0.8):
        super().__init__()
        self._init_loss_scale = _checks.real_number(
            "init_loss_scale", init_loss_scale, minimum=1.0, maximum=_checks.FLOAT32_MAX)
        self._incr_every_n_steps = _checks.positive_int("incr_every_n_steps", incr_every_n_steps)
        self._decr_every_n_nan_or_inf = _checks.positive_int("decr_every_n_nan_or_inf",
                                                             decr_every_n_nan_or_inf)
        self._incr_ratio = _checks.real_number("incr_ratio", incr_ratio, minimum=1.0,
                                               min_inclusive=False, accepted="> 1")
        self._decr_ratio = _checks.real_number("decr_ratio", decr_ratio, minimum=0.0,
                                               min_inclusive=False, maximum=1.0,
                                               max_inclusive=False,
                                               accepted="in the open interval (0, 1)")
        self._state()

    def _build_state(self):
        scale = self._add_weight("loss_scale", self._init_loss_scale, tf.float32)
        good = self._add_weight("good_steps", 0, tf.int32)
        bad = self._add_weight("bad_steps", 0, tf.int32)
        return {"scale_var": scale, "good_var": good, "bad_var": bad,
                "loss_scale": getattr(scale, "_npu_loss_scale_value", None)}

    @property
    def variables(self):
        """The manager's variables in the current graph: loss scale, good steps, bad steps."""
        s = self._state()
        return [s["scale_var"], s["good_var"], s["bad_var"]]

    def get_loss_scale(self):
        return self._scale_of_variable()

    def _next(self, finite_grads):
        finite = self._finite_flag(finite_grads)
        s = self._state()
        scale = tf.convert_to_tensor(s["scale_var"])
        good = tf.convert_to_tensor(s["good_var"])
        bad = tf.convert_to_tensor(s["bad_var"])
        zero = tf.zeros_like(good)
        good_next, bad_next = good + 1, bad + 1
        grow = tf.logical_and(finite, good_next >= self._incr_every_n_steps)
        shrink = tf.logical_and(tf.logical_not(finite),
                                bad_next >= self._decr_every_n_nan_or_inf)
        can_grow = scale < tf.constant(_GROWTH_CEILING / float(self._incr_ratio), tf.float32)
        grown = where(can_grow, scale * self._incr_ratio, scale)
        shrunk = tf.maximum(tf.constant(1.0, tf.float32), scale * self._decr_ratio)
        new_scale = where(grow, grown, where(shrink, shrunk, scale))
        new_good = where(finite, where(grow, zero, good_next), zero)
        new_bad = where(finite, where(grow, zero, bad), where(shrink, zero, bad_next))
        return new_scale, new_good, new_bad

    def next_loss_scale(self, finite_grads):
        with tf.name_scope("next_loss_scale"):
            return self._next(finite_grads)[0]

    def update_loss_scale(self, finite_grads):
        s = self._state()
        with tf.name_scope("update_loss_scale"):
            new_scale, new_good, new_bad = self._next(finite_grads)
            return tf.group(s["scale_var"].assign(new_scale), s["good_var"].assign(new_good),
                            s["bad_var"].assign(new_bad), name="assign")

    def get_config(self):
        return {"init_loss_scale": self._init_loss_scale,
                "incr_every_n_steps": self._incr_every_n_steps,
                "decr_every_n_nan_or_inf": self._decr_every_n_nan_or_inf,
                "incr_ratio": self._incr_ratio, "decr_ratio": self._decr_ratio}

    def __repr__(self):
        return "ExponentialUpdateLossScaleManager(%s)" % ", ".join(
            "%s=%r" % kv for kv in self.get_config().items())

    # -- state_dict (issue 10) --------------------------------------------------------------
    def _named_state_variables(self):
        scale, good, bad = self.variables
        return {"loss_scale": scale, "good_steps": good, "bad_steps": bad}

    def state_dict(self, session=None):
        """``{"loss_scale": float, "good_steps": int, "bad_steps": int}``.

        Eager: the current values. Graph mode: read with ``session`` (default: the default
        session; with neither, RuntimeError).
        """
        return _state_io.read(self, self._named_state_variables, session)

    def load_state_dict(self, state_dict, session=None):
        """Assigns the three values of a :meth:`state_dict` (same keys; session as there)."""
        _state_io.write(self, self._named_state_variables, state_dict, session)


# LossScaleManager, as_manager and LOSS_SCALE_TENSOR_NAME live in .base; named here too, where
# the managers were always found.
__all__ = ["LossScaleManager", "FixedLossScaleManager", "ExponentialUpdateLossScaleManager",
           "as_manager", "LOSS_SCALE_TENSOR_NAME"]
