"""A GradScaler's state (:class:`ScalerState`, the base of
:class:`~npu_loss_scale.frontends.grad_scaler.GradScaler`): the scale, growth count and factors as
variables made once (so traced code sees changes and a ``tf.train.Checkpoint`` saves them, all or
nothing), the checks of their values (constructor arguments, ``update(new_scale)``, a restored
state), torch's getters and setters and ``state_dict``/``load_state_dict``, and what an attached
:class:`~npu_loss_scale.OptimizerThread` changes about reading them (the main thread sees the
scale of the next step; ``up_to_date=True`` waits for the thread)."""
import threading

import numpy as np
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import staged as _staged
from npu_loss_scale._internal.compat.ops import executing_eagerly_outside_functions
from npu_loss_scale.frontends.scaler_iteration import Iteration

# The scale's range. MIN_SCALE is float32's smallest normal number (2**-126): backing off stops
# there, since a subnormal scale is flushed to zero by CPU kernels and 1/0 would turn every
# unscaled gradient into inf or NaN. MAX_SCALE is float32's largest finite number.
MIN_SCALE = float(np.finfo(np.float32).tiny)
MAX_SCALE = float(np.finfo(np.float32).max)
SCALE_ACCEPTED = ">= 1.1754944e-38 (float32's smallest normal number) and <= 3.4028235e38 " \
                 "(float32's largest)"


def is_tensor_like(value):
    """True for a tensor or variable (eager, graph or symbolic): a value ``scale`` multiplies and
    ``update(new_scale)`` checks as a tensor."""
    return isinstance(value, (tf.Tensor, tf.Variable)) or tf.is_tensor(value)


# torch's protocol is eager: an iteration's bookkeeping (which optimizer was unscaled or stepped,
# whether it overflowed, the guard against stepping on scaled gradients) happens in Python as
# scale(), unscale_(), step() and update() run, eagerly or while a tf.function traces. A graph
# that a Session runs again and again (TensorFlow 1.15's default) is not supported.
GRAPH_MODE_REFUSAL = (
    "GradScaler needs eager execution: TensorFlow 2, or tf.compat.v1.enable_eager_execution() "
    "at the start of a TensorFlow 1.15 program; its steps then run eagerly or inside "
    "tf.function. It was created while building a graph for a Session (TensorFlow 1.15's "
    "default graph mode, or inside tf.Graph().as_default()), which it does not support: each "
    "iteration's bookkeeping happens in Python as scale(), step() and update() run. In a "
    "graph, use NPULossScaleOptimizer (or MegatronMixedPrecisionOptimizer with "
    "DynamicGradScaler), which build the whole step as ops")


class _PlainState:
    """Holds the scaler's Python bookkeeping outside tf.Module's attribute tracking."""


class ScalerState(_staged.StagedChildren, tf.Module):
    """The variables of a GradScaler and torch's accessors for them (see the module docstring);
    :class:`~npu_loss_scale.frontends.grad_scaler.GradScaler` adds the iteration's protocol."""

    def __init__(self, init_scale, growth_factor, backoff_factor, growth_interval, enabled,
                 name):
        super().__init__(name=name)
        enabled = _checks.boolean("enabled", enabled)
        init_scale = self._check_scale(init_scale)
        growth_factor = self._check_growth_factor(growth_factor)
        backoff_factor = self._check_backoff_factor(backoff_factor)
        growth_interval = _checks.positive_int("growth_interval", growth_interval)
        if not executing_eagerly_outside_functions():
            raise RuntimeError(GRAPH_MODE_REFUSAL)
        py = _PlainState()
        py.enabled = enabled
        py.init_scale = init_scale
        py.iteration = Iteration()
        py.lock = threading.RLock()
        py.local = threading.local()     # .iteration while a job runs on the optimizer thread
        py.thread = None                 # the OptimizerThread attached, if any
        py.main_ident = threading.get_ident()
        py.main_scale = init_scale       # the scale the main thread sees (optimizer-thread mode)
        py.main_factors = (growth_factor, backoff_factor, growth_interval)
        self._py = py
        if enabled:
            with tf.init_scope():
                self._scale = tf.Variable(init_scale, dtype=tf.float32, trainable=False,
                                          name="scale")
                self._growth_tracker = tf.Variable(0, dtype=tf.int32, trainable=False,
                                                   name="growth_tracker")
                self._growth_factor = tf.Variable(growth_factor, dtype=tf.float32,
                                                  trainable=False, name="growth_factor")
                self._backoff_factor = tf.Variable(backoff_factor, dtype=tf.float32,
                                                   trainable=False, name="backoff_factor")
                self._growth_interval = tf.Variable(growth_interval, dtype=tf.int32,
                                                    trainable=False, name="growth_interval")
            # A tf.train.Checkpoint restores the five all or nothing (see _staged.StagedState).
            py.staged = _staged.StagedState("GradScaler", {
                "_scale": self._scale, "_growth_tracker": self._growth_tracker,
                "_growth_factor": self._growth_factor, "_backoff_factor": self._backoff_factor,
                "_growth_interval": self._growth_interval})

    def _staged_state(self):
        py = self.__dict__.get("_py")
        return getattr(py, "staged", None)

    # -- checks ---------------------------------------------------------------------------------
    @staticmethod
    def _check_scale(value, name="init_scale"):
        return _checks.real_number(name, value, minimum=MIN_SCALE, maximum=MAX_SCALE,
                                   accepted=SCALE_ACCEPTED)

    @staticmethod
    def _check_growth_factor(value, name="growth_factor"):
        return _checks.real_number(name, value, minimum=1.0, min_inclusive=False,
                                   accepted="> 1")

    @staticmethod
    def _check_backoff_factor(value, name="backoff_factor"):
        return _checks.real_number(name, value, minimum=0.0, min_inclusive=False,
                                   maximum=1.0, max_inclusive=False, accepted="in (0, 1)")

    @staticmethod
    def _check_new_scale(new_scale):
        if is_tensor_like(new_scale):
            tensor = tf.convert_to_tensor(new_scale)
            if tensor.shape.rank not in (0, None) or tensor.shape.num_elements() not in (1, None):
                raise ValueError("new_scale must be a scalar (or one-element) tensor; got shape %s"
                                 % (tensor.shape,))
            if not tensor.dtype.is_floating and not tensor.dtype.is_integer:
                raise TypeError("new_scale must be a real number or a real tensor; got dtype %s"
                                % tensor.dtype.name)
            value = tf.reshape(tf.cast(tensor, tf.float32), [])
            known = tf.get_static_value(value)
            if known is not None:   # eager, or a constant while tracing: refuse it now
                return tf.constant(ScalerState._check_new_scale_number(float(known)))
            message = "new_scale must be a finite real number " + SCALE_ACCEPTED
            checks = [tf.debugging.assert_greater_equal(value, MIN_SCALE, message=message),
                      tf.debugging.assert_less_equal(value, MAX_SCALE, message=message)]
            with tf.control_dependencies(checks):
                return tf.identity(value)
        return ScalerState._check_new_scale_number(new_scale)

    @staticmethod
    def _check_new_scale_number(new_scale):
        return _checks.real_number("new_scale", new_scale, minimum=MIN_SCALE, maximum=MAX_SCALE,
                                   accepted=SCALE_ACCEPTED + " (a Python number or a scalar "
                                   "tensor)")

    def _state_checks(self):
        """Assert ops refusing a state the constructor and ``load_state_dict`` would refuse.

        ``tf.train.Checkpoint`` assigns the variables without asking the scaler, so a tampered
        or foreign checkpoint can restore a NaN, zero or negative scale, or a negative growth
        count; the first ``scale``/``unscale_``/``step``/``update`` after such a restore fails
        (``InvalidArgumentError`` naming the variable, its value and what is accepted) before
        anything is applied.
        """
        rules = (
            ("scale", self._scale, lambda v: (v >= MIN_SCALE) & (v <= MAX_SCALE),
             "a float32 " + SCALE_ACCEPTED),
            ("growth_tracker", self._growth_tracker, lambda v: v >= 0, "an integer >= 0"),
            ("growth_factor", self._growth_factor, lambda v: (v > 1.0) & (v <= MAX_SCALE),
             "a finite number > 1"),
            ("backoff_factor", self._backoff_factor, lambda v: (v > 0.0) & (v < 1.0),
             "a number in (0, 1)"),
            ("growth_interval", self._growth_interval, lambda v: v >= 1, "an integer >= 1"),
        )
        checks = []
        for name, variable, accepted, text in rules:
            value = tf.convert_to_tensor(variable)
            checks.append(tf.debugging.Assert(
                accepted(value),
                ["GradScaler: variable %s (%s) holds" % (name, variable.name), value,
                 "; accepted: %s. Was it restored from a checkpoint that was altered or not "
                 "written by a GradScaler? Restore another checkpoint or call "
                 "load_state_dict()." % text], name="check_" + name))
        return checks

    # -- properties ------------------------------------------------------------------------------
    @property
    def enabled(self):
        return self._py.enabled

    def is_enabled(self):
        """True when scaling is enabled (torch's name)."""
        return self._py.enabled

    # -- threads ---------------------------------------------------------------------------------
    def _current(self):
        job_iteration = getattr(self._py.local, "iteration", None)
        return job_iteration if job_iteration is not None else self._py.iteration

    def _async(self):
        return self._py.thread is not None

    def _on_optimizer_thread(self):
        return getattr(self._py.local, "iteration", None) is not None

    def _attach_thread(self, thread):
        with self._py.lock:
            if self._py.thread is not None and self._py.thread is not thread:
                raise RuntimeError("this GradScaler already has an OptimizerThread; close it first")
            if not tf.executing_eagerly():
                raise RuntimeError("OptimizerThread needs eager execution; got a graph context")
            self._py.thread = thread
            self._py.main_ident = threading.get_ident()
            if self._py.enabled:
                self._state_checks()      # eager: raises on a state restored from a bad checkpoint
                self._py.main_scale = float(self._scale.numpy())
                self._py.main_factors = (float(self._growth_factor.numpy()),
                                         float(self._backoff_factor.numpy()),
                                         int(self._growth_interval.numpy()))

    def _detach_thread(self, thread):
        with self._py.lock:
            if self._py.thread is thread:
                self._py.thread = None

    def _sync(self):
        if self._py.thread is not None and not self._on_optimizer_thread():
            self._py.thread.synchronize()

    # -- getters and setters --------------------------------------------------------------------
    def get_scale(self):
        """The scale as a Python float (1.0 when disabled).

        With an :class:`OptimizerThread`: on the optimizer thread, the scale of the step being
        applied; on the main thread, the scale the next ``scale()`` uses. While tracing a
        ``tf.function``: a float32 scalar tensor.
        """
        if not self._py.enabled:
            return 1.0
        if self._async():
            iteration = self._current()
            if self._on_optimizer_thread() or iteration.scale is not None:
                return float(iteration.scale)
            return float(self._py.main_scale)
        if not tf.executing_eagerly():
            return tf.convert_to_tensor(self._scale)
        return float(self._scale.numpy())

    def _get_factor(self, index, variable, up_to_date):
        if self._async() and not self._on_optimizer_thread():
            if up_to_date:
                self._sync()
            else:
                return self._py.main_factors[index]
        value = variable.numpy()
        return int(value) if index == 2 else float(value)

    def get_growth_factor(self, up_to_date=False):
        """The growth factor. ``up_to_date=True`` waits for the optimizer thread first."""
        if not self._py.enabled:
            return self._py.main_factors[0]
        return self._get_factor(0, self._growth_factor, up_to_date)

    def get_backoff_factor(self, up_to_date=False):
        """The backoff factor. ``up_to_date=True`` waits for the optimizer thread first."""
        if not self._py.enabled:
            return self._py.main_factors[1]
        return self._get_factor(1, self._backoff_factor, up_to_date)

    def get_growth_interval(self, up_to_date=False):
        """The growth interval. ``up_to_date=True`` waits for the optimizer thread first."""
        if not self._py.enabled:
            return self._py.main_factors[2]
        return self._get_factor(2, self._growth_interval, up_to_date)

    def _set_factor(self, index, variable, value):
        factors = list(self._py.main_factors)
        factors[index] = value
        self._py.main_factors = tuple(factors)
        if not self._py.enabled:
            return
        if self._async() and not self._on_optimizer_thread():
            thread = self._py.thread
            thread._enqueue_call(lambda: variable.assign(value))  # pylint: disable=protected-access
        else:
            variable.assign(value)

    def set_growth_factor(self, new_factor):
        """Sets the growth factor (> 1)."""
        self._set_factor(0, self._growth_factor, self._check_growth_factor(new_factor))

    def set_backoff_factor(self, new_factor):
        """Sets the backoff factor (in (0, 1))."""
        self._set_factor(1, self._backoff_factor, self._check_backoff_factor(new_factor))

    def set_growth_interval(self, new_interval):
        """Sets the growth interval (an integer >= 1)."""
        self._set_factor(2, self._growth_interval,
                         _checks.positive_int("new_interval", new_interval))

    def _get_growth_tracker(self):
        if not self._py.enabled:
            return 0
        self._sync()
        return int(self._growth_tracker.numpy())

    # -- state_dict -------------------------------------------------------------------------------
    def state_dict(self):
        """torch's keys: ``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval``,
        ``_growth_tracker`` (Python numbers); ``{}`` when disabled. Waits for the optimizer thread.
        """
        if not self._py.enabled:
            return {}
        self._sync()
        return {"scale": float(self._scale.numpy()),
                "growth_factor": float(self._growth_factor.numpy()),
                "backoff_factor": float(self._backoff_factor.numpy()),
                "growth_interval": int(self._growth_interval.numpy()),
                "_growth_tracker": int(self._growth_tracker.numpy())}

    def load_state_dict(self, state_dict):
        """Loads what :meth:`state_dict` returned. Disabled: does nothing; an empty dict on an
        enabled scaler raises RuntimeError (it came from a disabled scaler)."""
        if not self._py.enabled:
            return
        if not isinstance(state_dict, dict):
            raise TypeError("state_dict must be a dict from GradScaler.state_dict(); got %r "
                            "(type %s)" % (state_dict, type(state_dict).__name__))
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        missing = [k for k in ("scale", "growth_factor", "backoff_factor", "growth_interval",
                               "_growth_tracker") if k not in state_dict]
        if missing:
            raise KeyError("state_dict lacks %s (accepted: what GradScaler.state_dict() returns)"
                           % ", ".join(missing))
        self._sync()
        # Everything is checked before anything is assigned: a failed load changes nothing.
        scale = self._check_scale(state_dict["scale"], "state_dict['scale']")
        growth = self._check_growth_factor(state_dict["growth_factor"],
                                           "state_dict['growth_factor']")
        backoff = self._check_backoff_factor(state_dict["backoff_factor"],
                                             "state_dict['backoff_factor']")
        interval = _checks.positive_int("state_dict['growth_interval']",
                                        state_dict["growth_interval"])
        tracker = _checks.non_negative_int("state_dict['_growth_tracker']",
                                            state_dict["_growth_tracker"])
        self._scale.assign(scale)
        self._growth_factor.assign(growth)
        self._backoff_factor.assign(backoff)
        self._growth_interval.assign(interval)
        self._growth_tracker.assign(tracker)
        self._py.main_scale = scale
        self._py.main_factors = (growth, backoff, interval)


__all__ = ["ScalerState", "MIN_SCALE", "MAX_SCALE", "SCALE_ACCEPTED"]
