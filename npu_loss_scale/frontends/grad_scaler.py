"""GradScaler: ``torch.amp.GradScaler``'s interface and rules for TensorFlow 2 training loops.

The interface follows RoundPipe's drop-in GradScaler (itself ``torch.amp.GradScaler``'s), with one
change TensorFlow forces: variables have no ``.grad``, so the gradients are handed to
:meth:`GradScaler.unscale_` (which returns them unscaled) and :meth:`GradScaler.step` (which
applies them). docs/grad_scaler.md maps every torch call to its TensorFlow form.

Overflow detection is the package's (see :mod:`npu_loss_scale.detection.step`): on an
Ascend device in saturation mode, and in its CPU emulation, an overflowed gradient is ±65504 and
looks finite; the float-status register says it overflowed, and the scaler reads it.

Example (eager; the same code runs inside ``tf.function``)::

    import tensorflow as tf
    import npu_loss_scale as nls

    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.build((None, 4))
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=2.0**10)
    x, y = tf.ones([8, 4]), tf.zeros([8, 1])
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
        scaled = scaler.scale(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    scaler.step(opt, list(zip(grads, model.trainable_variables)))
    scaler.update()

Rules (torch's, where RoundPipe's documentation is silent):

* ``update()``: an overflow in any optimizer's gradients this iteration multiplies the scale by
  ``backoff_factor`` once, but never below ``MIN_SCALE`` (2**-126, float32's smallest normal
  number; an overflow there prints a warning), and zeroes the growth count; otherwise the count
  grows by one, and when it reaches ``growth_interval`` the scale is multiplied by
  ``growth_factor`` (only if the result is finite) and the count restarts from zero.
  ``update(new_scale)`` sets the scale and leaves the count alone. The twin of this rule:
  :class:`npu_loss_scale.scaling.reference.torch.GradScalerTwin`.
* An overflow is found in the scaled gradients (see below) or in the unscaled ones (inf/NaN).
* ``unscale_`` twice, ``step`` twice, or ``unscale_`` after ``step`` for one optimizer in one
  iteration raise ``RuntimeError``; ``update()`` with no ``step``/``unscale_`` before it raises.
  ``step`` after ``unscale_`` raises ``RuntimeError`` when a gradient was computed from the scaled
  gradients given to ``unscale_`` rather than from its result (torch's in-place habit).
* A state restored by ``tf.train.Checkpoint`` that the constructor would refuse (a NaN or zero
  scale, a negative growth count...) fails the next ``scale``/``unscale_``/``step``/``update``;
  a value of the wrong shape fails the restore itself, before any of the five variables changes.
* ``enabled=False``: ``scale`` returns its input, ``unscale_`` returns the gradients as given,
  ``step`` calls ``optimizer.apply_gradients`` and returns its result, ``update`` does nothing,
  ``get_scale()`` is 1.0, ``state_dict()`` is ``{}``.

Inside ``tf.function``: the scale, growth count and factors are ``tf.Variable`` s created once in
the constructor (so changes made between calls are seen by traced code and a
``tf.train.Checkpoint(scaler=scaler)`` saves them); the per-iteration bookkeeping happens while the
function is traced, so call ``scale``/``step``/``update`` of one iteration in the same function
(or all eagerly). ``get_scale()`` returns a tensor while tracing (a Python float needs a value).
"""
import collections.abc
import threading

import numpy as np
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal.report import StepReport
from npu_loss_scale._internal.gradients import values_of
from npu_loss_scale.scaling import torch as torch_rule
from npu_loss_scale._internal.messages import LossScaleStuckWarning, warn_when_run
from npu_loss_scale.scaling.unscale import Reciprocal
from npu_loss_scale.detection.step import OverflowCheck
from npu_loss_scale.frontends.scaler_iteration import HandedOut, Iteration, OptState
from npu_loss_scale.frontends.scaler_state import MAX_SCALE, MIN_SCALE, SCALE_ACCEPTED, \
    ScalerState, is_tensor_like


class NoInfChecksError(RuntimeError, AssertionError):
    """``update()`` was called with no ``unscale_``/``step`` before it in this iteration.

    torch raises an AssertionError here; this error is both a RuntimeError and an AssertionError.
    """


class GradScaler(ScalerState):
    """Loss scaling for TensorFlow 2 loops with ``torch.amp.GradScaler``'s interface and rules.

    See the module docstring for the rules and an example, and docs/grad_scaler.md for the
    torch-to-TensorFlow mapping.

    Args:
      init_scale: initial scale, a finite real > 0 (default 2**16).
      growth_factor: factor applied after ``growth_interval`` overflow-free iterations, > 1.
      backoff_factor: factor applied after an iteration with an overflow, in (0, 1).
      growth_interval: overflow-free iterations between growths, an integer >= 1.
      enabled: False makes every method a pass-through (see the module docstring).
      backend: overflow detection, ``"npu"``, ``"emulation"``, ``"inf_nan"`` or None (the
        package's choice, :func:`npu_loss_scale.get_backend_name`).
      is_distributed: sum the found-overflow flag over ranks so all ranks skip together (one
        collective per optimizer per iteration; see :mod:`npu_loss_scale.agreement`).
      agreement: with ``is_distributed``, how ranks agree (name or ``Agreement``); None = discover.
    """

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True, *, backend=None, is_distributed=False,
                 agreement=None, name="grad_scaler"):
        super().__init__(init_scale, growth_factor, backoff_factor, growth_interval, enabled,
                         name=name)
        _checks.boolean("is_distributed", is_distributed)
        self._check = OverflowCheck(backend, is_distributed, agreement) if enabled else None

    @property
    def backend_name(self):
        """The overflow detection backend in use (None when disabled)."""
        return self._check.backend_name if self._check is not None else None

    @property
    def _per_optimizer_states(self):
        """id(optimizer) -> {"stage": OptState, "found_inf": ...} for the calling thread's
        iteration (torch's attribute name; read-only view)."""
        return dict(self._current().states)

    @property
    def step_report(self):
        """This iteration's :class:`~npu_loss_scale.StepReport`, between ``step()`` (or
        ``unscale_()``) and ``update()``: ``overflow`` (an optimizer's gradients overflowed this
        iteration, so ``update()`` backs off) and ``scale`` (:meth:`get_scale`). Read it eagerly;
        ``update()`` ends the iteration and forgets it."""
        found = self._current().found_infs()
        if not found:
            raise ValueError("the GradScaler has no step recorded in this iteration: read its "
                             "step_report after scaler.step(...) and before scaler.update() "
                             "(update() ends the iteration and forgets it)")
        return StepReport(overflow=sum(float(np.asarray(f)) for f in found) > 0,
                          scale=self.get_scale())

    # -- scale -----------------------------------------------------------------------------------
    def _scale_tensor(self):
        """float32 scalar the current iteration's loss is (or was) scaled with."""
        iteration = self._current()
        if self._async():
            if not tf.executing_eagerly():
                raise RuntimeError("with an OptimizerThread, call scale(), unscale_() and step() "
                                   "eagerly (each step's scale is a Python number that a "
                                   "tf.function would freeze); the model and the optimizer may "
                                   "use tf.function inside")
            if iteration.scale is None:
                iteration.scale = self._py.main_scale
            return tf.constant(iteration.scale, tf.float32)
        with tf.control_dependencies(self._state_checks()):
            return tf.identity(self._scale)

    def scale(self, outputs):
        """Multiplies a tensor, or every tensor of a (nested) iterable, by the scale.

        A list or tuple (named tuples too) comes back as the same type; any other iterable (a
        generator, say) comes back as an iterator over the scaled tensors, as torch's does.
        Strings, bytes and mappings are refused. Disabled: returns ``outputs`` unchanged. A
        float16 output is multiplied in float32 and cast back (the result may saturate or
        overflow in float16, as torch's would; scale a float32 loss).
        """
        if not self._py.enabled:
            return outputs
        scale = self._scale_tensor()

        def apply(value):
            if is_tensor_like(value):
                value = tf.convert_to_tensor(value)
                if value.dtype in (tf.float16, tf.bfloat16):
                    return tf.cast(tf.cast(value, tf.float32) * scale, value.dtype)
                return value * tf.cast(scale, value.dtype)
            if isinstance(value, (str, bytes, collections.abc.Mapping, np.ndarray)) or \
                    not isinstance(value, collections.abc.Iterable):
                raise TypeError("outputs must be a tensor or an iterable (list, tuple, "
                                "generator...) of tensors; got %r (type %s)"
                                % (value, type(value).__name__))
            if isinstance(value, tuple) and hasattr(value, "_fields"):   # a named tuple
                return type(value)(*[apply(v) for v in value])
            if isinstance(value, (list, tuple)):
                return type(value)(apply(v) for v in value)
            return map(apply, value)

        return apply(outputs)

    # -- unscale_ ---------------------------------------------------------------------------------
    @staticmethod
    def _split(grads):
        """(gradients, variables or None, rebuild) for a list of grads or of (grad, var) pairs."""
        grads = list(grads)
        pairs = bool(grads) and all(isinstance(g, tuple) and len(g) == 2 for g in grads)
        if pairs:
            return [g for g, _ in grads], [v for _, v in grads], True
        return grads, None, False

    def _read_register(self, iteration, step=None, after=()):
        """The iteration's register flag: read (and cleared) at the first call, then kept and
        OR-ed with anything recorded since (later reads), as the register is sticky. ``step``:
        the :class:`~npu_loss_scale.detection.step.StepCheck` reading (a new one by default:
        the optimizer thread's ``submit`` reads before any gradient is unscaled)."""
        step = self._check.start() if step is None else step
        if not step.uses_register():
            return None
        fresh = step.end(step.read(after))
        if iteration.register is None or not _same_context(iteration.register):
            iteration.register = fresh
        else:
            iteration.register = tf.maximum(iteration.register, fresh)
        return iteration.register

    def unscale_(self, optimizer, grads):
        """Divides ``grads`` by the scale and records whether any overflowed; returns them.

        ``grads``: the gradients of ``optimizer``'s variables, a list of tensors (None allowed) or
        of ``(gradient, variable)`` pairs; the same structure comes back unscaled. Pass what it
        returns (clipped, if you like) to :meth:`step`, which then does not unscale again. At most
        once per optimizer per iteration (RuntimeError otherwise). Disabled: returns ``grads``.
        """
        if not self._py.enabled:
            return grads
        iteration = self._current()
        state = iteration.state_for(optimizer)
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        unscaled = self._unscale(iteration, state, grads)
        state["handed_out"] = HandedOut(grads, unscaled)
        return unscaled

    def _unscale(self, iteration, state, grads):
        gradients, variables, pairs = self._split(grads)
        inv_scale = Reciprocal.of(self._scale_tensor())   # exact at every scale
        step = self._check.start()
        if not self._async():
            register = self._read_register(iteration, step, after=_flat_tensors(gradients))
        elif not self._on_optimizer_thread() and iteration.register is None:
            # Optimizer-thread mode, main thread (unscale_ before clipping, say): read the
            # register now, once for the iteration; submit() reuses this read.
            register = self._read_register(iteration, step, after=_flat_tensors(gradients))
        else:
            # Optimizer-thread mode: the register was read for this iteration already (by
            # submit() or by a main-thread unscale_()); it is never read twice.
            register = iteration.register
        unscaled, bad = step.check_and_unscale(gradients, inv_scale)
        # torch checks the unscaled gradients: a finite scaled gradient can still become inf
        # when unscaled (a large gradient at a scale below 1).
        bad = bad + step.count_nonfinite(unscaled)
        found = bad if register is None else bad + register
        state["found_inf"] = step.agree(tf.cast(found > 0, tf.float32))
        state["stage"] = OptState.UNSCALED
        if pairs:
            return list(zip(unscaled, variables))
        return unscaled

    # -- step -------------------------------------------------------------------------------------
    def step(self, optimizer, grads_and_vars, *args, **kwargs):
        """Unscales (unless :meth:`unscale_` did) and applies ``grads_and_vars`` unless anything
        overflowed.

        ``optimizer``: a Keras optimizer or a ``tf.compat.v1.train.Optimizer``; applying is
        ``optimizer.apply_gradients(grads_and_vars, *args, **kwargs)``. Returns that call's result
        when the update ran (eagerly), None when it was skipped or while tracing a
        ``tf.function`` (where the skip is a ``tf.cond``). Disabled: applies and returns the result.
        """
        if not self._py.enabled:
            return optimizer.apply_gradients(grads_and_vars, *args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        if not hasattr(optimizer, "apply_gradients"):
            raise TypeError("optimizer must have apply_gradients (a Keras optimizer or a "
                            "tf.compat.v1.train.Optimizer); got %r (type %s)"
                            % (optimizer, type(optimizer).__name__))
        if self._async() and not self._on_optimizer_thread():
            raise RuntimeError("with an OptimizerThread attached, step() runs on that thread: "
                               "call thread.submit(lambda: scaler.step(optimizer, "
                               "grads_and_vars)), not scaler.step() on the main thread")
        iteration = self._current()
        state = iteration.state_for(optimizer)
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        grads_and_vars = list(grads_and_vars)
        if not all(isinstance(p, tuple) and len(p) == 2 for p in grads_and_vars):
            raise TypeError("grads_and_vars must be a list of (gradient, variable) pairs; got %r"
                            % (grads_and_vars[:3],))
        if state["stage"] is OptState.READY:
            grads_and_vars = self._unscale(iteration, state, grads_and_vars)
        else:
            state["handed_out"].refuse_scaled(grads_and_vars)
        found = state["found_inf"]
        state["stage"] = OptState.STEPPED
        if tf.executing_eagerly():
            if float(found) > 0:
                return None
            return optimizer.apply_gradients(grads_and_vars, *args, **kwargs)
        _build_optimizer(optimizer, [v for _, v in grads_and_vars])

        def apply():
            result = optimizer.apply_gradients(grads_and_vars, *args, **kwargs)
            deps = [result] if isinstance(result, (tf.Operation, tf.Tensor)) else []
            with tf.control_dependencies(deps):
                return tf.constant(True)

        tf.cond(found > 0, lambda: tf.constant(False), apply)
        return None

    # -- update -----------------------------------------------------------------------------------
    def update(self, new_scale=None):
        """Ends the iteration: adjusts the scale by torch's rules, or sets it to ``new_scale``.

        ``new_scale``: a Python number or a scalar tensor; it is copied (later changes to the
        tensor do not reach the scaler) and the growth count is left alone. Main thread only when
        an :class:`OptimizerThread` is attached. Disabled: does nothing.
        """
        if not self._py.enabled:
            return None
        if self._on_optimizer_thread() or (self._async() and
                                           threading.get_ident() != self._py.main_ident):
            raise RuntimeError("GradScaler.update() must be called from the main thread (the one "
                               "that created the OptimizerThread), not from %r"
                               % threading.current_thread().name)
        if new_scale is not None:
            new_scale = self._check_new_scale(new_scale)
        iteration = self._py.iteration
        if self._async():
            thread = self._py.thread
            return thread._enqueue_update(iteration, new_scale)  # pylint: disable=protected-access
        found_infs = iteration.found_infs()
        # Raise before anything changes: the iteration is kept, so a corrected retry works.
        if new_scale is None and any(not _same_context(f) for f in found_infs):
            raise RuntimeError("update() must run where step()/unscale_() of this iteration ran: "
                               "all inside the same tf.function, or all eagerly")
        if new_scale is None and not found_infs:
            raise NoInfChecksError("No inf checks were recorded prior to update().")
        if new_scale is not None:
            result = self._scale.assign(tf.cast(new_scale, tf.float32), read_value=False)
        else:
            result = self._apply_rules(tf.add_n([tf.convert_to_tensor(f) for f in found_infs]))
        self._py.iteration.stop_recording()
        self._py.iteration = Iteration()
        return result

    def _apply_rules(self, found):
        """torch's update rule (:func:`npu_loss_scale.scaling.torch.next_state`) on the
        variables, as ops (eager or traced), with one addition: a backoff never takes the scale
        below ``MIN_SCALE`` (an overflow there warns instead)."""
        with tf.control_dependencies(self._state_checks()):
            scale = tf.identity(self._scale)
            tracker = tf.identity(self._growth_tracker)
        overflow = found > 0
        new_scale, new_tracker = torch_rule.next_state(
            scale, tracker, tf.logical_not(overflow), growth_factor=self._growth_factor,
            backoff_factor=self._backoff_factor, growth_interval=self._growth_interval,
            min_scale=MIN_SCALE)
        stuck = tf.cond(tf.logical_and(overflow, scale <= MIN_SCALE),
                        lambda: _warn_stuck_at_min_scale(scale), lambda: tf.constant(False))
        return tf.group(self._scale.assign(new_scale, read_value=False),
                        self._growth_tracker.assign(new_tracker, read_value=False), stuck)


def _warn_stuck_at_min_scale(scale):
    """Warns (:class:`LossScaleStuckWarning`, when the update runs) that an overflow happened at
    the smallest scale."""
    return warn_when_run(
        LossScaleStuckWarning, "npu_loss_scale: GradScaler: gradients overflowed at the smallest "
        "scale %g (float32's smallest normal number); the scale cannot go lower and the step is "
        "skipped. The gradients overflow whatever the scale: look for an inf or NaN in the model "
        "or the loss.", [scale], name="warn_stuck_at_min_scale")


def _same_context(tensor):
    """True when ``tensor`` can be used where ops are being built now."""
    eager_now = tf.executing_eagerly()
    try:
        graph = tensor.graph
    except AttributeError:
        return eager_now
    return (not eager_now) and graph is tf.compat.v1.get_default_graph()


def _flat_tensors(grads):
    """The value tensors of the gradients (None entries skipped): what a register read waits for."""
    return [values_of(g) for g in grads if g is not None]


def _build_optimizer(optimizer, variables):
    """Creates a Keras optimizer's slot variables now, outside the ``tf.cond`` of a skip.

    Keras 3 marks a built optimizer with ``built``, Keras 2.15 with ``_built``;
    ``tf.compat.v1.train`` optimizers have no ``build`` (they create slots in an init scope).
    """
    build = getattr(optimizer, "build", None)
    if build is None:
        return
    built = getattr(optimizer, "built", None)
    if built is None:
        built = getattr(optimizer, "_built", True)
    if built:
        return
    with tf.init_scope():
        build(variables)


__all__ = ["GradScaler", "OptState", "NoInfChecksError", "MIN_SCALE", "MAX_SCALE", "SCALE_ACCEPTED"]
