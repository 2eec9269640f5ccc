"""One iteration of a :class:`~npu_loss_scale.frontends.grad_scaler.GradScaler`, from one
``update()`` to the next: where each optimizer is (:class:`OptState`), the register's read, and
what ``unscale_`` handed out, so that ``step`` can refuse gradients computed from the scaled ones
(torch's in-place habit, ported line by line)."""
import enum
import threading

import tensorflow as tf

from npu_loss_scale._internal.compat.variables import key as ref_key  # 1.15: experimental_ref
from npu_loss_scale._internal.gradients import floating_values, values_of


class OptState(enum.Enum):
    """Where one optimizer is in the current iteration (torch's names)."""
    READY = 0
    UNSCALED = 1
    STEPPED = 2


class Iteration:
    """What one iteration (from one ``update()`` to the next) knows.

    ``scale``: the Python float the loss was scaled with (optimizer-thread mode only; the variable
    is read otherwise). ``states``: id(optimizer) -> {"stage", "found_inf"}. ``register``: the
    register's flag read for this iteration (sticky: read once, OR-ed into every optimizer).
    """

    def __init__(self, scale=None):
        self.scale = scale
        self.states = {}
        self.register = None
        self.submitted = 0

    def state_for(self, optimizer):
        return self.states.setdefault(id(optimizer), {"stage": OptState.READY, "found_inf": None,
                                                      "optimizer": optimizer,
                                                      "handed_out": None})

    def found_infs(self):
        """The found-overflow flags recorded so far, one per optimizer that ran ``unscale_`` or
        ``step`` in this iteration."""
        return [state["found_inf"] for state in self.states.values()
                if state["found_inf"] is not None]

    def stop_recording(self):
        """Stops the eager records of ``unscale_`` started on the calling thread."""
        for state in self.states.values():
            if state["handed_out"] is not None:
                state["handed_out"].stop_recording()


class HandedOut:
    """What ``unscale_`` received (scaled) and returned (unscaled) for one optimizer.

    In torch, ``unscale_`` works in place and ``step`` uses ``.grad``: code ported line by line
    ignores ``unscale_``'s result and hands the *scaled* gradients (perhaps clipped) to ``step``,
    which would apply them still multiplied by the scale. ``step`` asks this record whether any
    gradient it gets was computed from the scaled ones other than through ``unscale_``'s result:

    * in a graph (``tf.function``), by walking the ops' inputs back from each gradient, stopping
      at ``unscale_``'s results;
    * eagerly, through a ``GradientTape`` that watches the scaled gradients from the moment
      ``unscale_`` returns (its results are not connected to them on that tape) until ``step``,
      ``OptimizerThread.submit`` or ``update`` on the same thread stops it.
    """

    def __init__(self, scaled, unscaled):
        self.scaled = _floating_values(scaled)
        self.unscaled = _floating_values(unscaled)
        self.tape = None
        if tf.executing_eagerly() and self.scaled:
            self.thread = threading.get_ident()
            self.tape = tf.GradientTape(persistent=True, watch_accessed_variables=False)
            self.tape.__enter__()      # pylint: disable=unnecessary-dunder-call
            self.tape.watch(self.scaled)

    def stop_recording(self):
        if self.tape is not None and self.thread == threading.get_ident() and \
                self.tape._recording:  # pylint: disable=protected-access
            self.tape.__exit__(None, None, None)

    def refuse_scaled(self, grads_and_vars):
        """Raises RuntimeError when a gradient was computed from the scaled gradients."""
        self.stop_recording()
        suspects = [(g, v) for g, v in grads_and_vars
                    if g is not None and values_of(g).dtype.is_floating]
        if self.tape is None:
            if tf.executing_eagerly():
                return     # unscale_() was traced, step() is eager: update() refuses the mix
            safe = {ref_key(t) for t in self.unscaled}
            offenders = [v for g, v in suspects if self._graph_reaches_scaled(values_of(g), safe)]
        elif self.tape._recording:  # pylint: disable=protected-access
            raise RuntimeError("step() after unscale_() on another thread: call "
                               "OptimizerThread.submit() (or step()) on the thread that called "
                               "unscale_() first")
        elif self._tape_reaches_scaled([values_of(g) for g, _ in suspects]):   # one pass first
            offenders = [v for g, v in suspects if self._tape_reaches_scaled([values_of(g)])]
        else:
            offenders = []
        if offenders:
            raise RuntimeError(
                "step(): the gradient given for %s was computed from the scaled gradients passed "
                "to unscale_(), not from the unscaled ones unscale_() returned, and would be "
                "applied still multiplied by the loss scale. TensorFlow tensors do not change in "
                "place as torch's .grad does: write grads = scaler.unscale_(optimizer, grads), "
                "then clip and pass those grads to step()."
                % ", ".join(repr(getattr(v, "name", v)) for v in offenders))

    def _tape_reaches_scaled(self, tensors):
        if any(t is s for t in tensors for s in self.scaled):
            return True
        grads = self.tape.gradient(tensors, self.scaled,
                                   unconnected_gradients=tf.UnconnectedGradients.NONE)
        return any(g is not None for g in grads)

    def _graph_reaches_scaled(self, tensor, safe):
        """Walks the ops' inputs back from ``tensor``; ``safe`` holds tensors known not to lead
        to the scaled gradients (``unscale_``'s results, then every tensor of a clean walk)."""
        scaled = {ref_key(t) for t in self.scaled}
        seen, todo = set(), [tensor]
        while todo:
            t = todo.pop()
            key = ref_key(t)
            if key in seen or key in safe:
                continue
            if key in scaled:
                return True
            seen.add(key)
            todo.extend(t.op.inputs)
        safe.update(seen)
        return False


def _floating_values(grads):
    """The floating value tensors of a list of gradients or of (gradient, variable) pairs."""
    return floating_values([g[0] if isinstance(g, tuple) and len(g) == 2 else g for g in grads])


__all__ = ["OptState", "Iteration", "HandedOut"]
