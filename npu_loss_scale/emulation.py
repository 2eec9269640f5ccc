"""CPU emulation of the Ascend float-status register and of saturation-mode arithmetic.

On an Atlas training device (Ascend 910) running in *saturation mode*, an overflowing result
becomes the extreme value of its dtype (±65504 for float16, ±3.4028235e38 for float32) and NaN
becomes 0. Nothing in the tensors says so; the device instead sets a sticky, device-global
*float-status register* that must be read and cleared explicitly. This module reproduces both:

* a register with the npu_bridge status-op names (:func:`npu_get_float_status_v2` and friends),
  sticky until cleared, one per graph (and per replica of a ``tf.distribute`` strategy, as each
  device has its own), not saved in checkpoints and needing no initialisation;
* :func:`saturate`, which applies saturation to a tensor on the forward pass and to the gradient
  flowing back through it, and records every overflow in the register
  (:mod:`npu_loss_scale.saturation` applies it to whole models);
* the overflow-mode switch (:func:`set_device_sat_mode`, :func:`get_device_sat_mode`,
  :func:`is_inf_nan_enabled`): in INF/NaN mode ``saturate`` leaves IEEE results alone.

Example::

    import tensorflow as tf
    from npu_loss_scale import emulation
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        y = emulation.saturate(tf.cast([1e5, -1e5, float("nan"), 3.0], tf.float16))
        print(sess.run(y))                                     # [65504. -65504. 0. 3.]
        print(sess.run(emulation.npu_get_float_status_v2()))   # [1 1 0 0 0 0 0 0]
        sess.run(emulation.npu_clear_float_status_v2())
        print(sess.run(emulation.npu_get_float_status_v2()))   # [0 0 0 0 0 0 0 0]

Register words: word 0 is set when a value overflowed to ±MAX, word 1 when a NaN was replaced
by 0; the other six stay 0. "All eight words zero" means "no overflow since the last clear",
exactly as on the device.

**When the real device is in use** (the detection backend is ``npu`` and the real ``npu_bridge``
imports), the mode functions are routed to ``npu_bridge.estimator.npu.npu_plugin`` so the
device's own setting is the one that counts, and :func:`saturate` is the identity: the hardware
saturates by itself and its register is the real one. The same model code thus runs on CPU with
emulation and on the device without it.
"""
import os
import threading

import tensorflow as tf


STATUS_WORDS = 8
_OVERFLOW_WORD = 0
_NAN_WORD = 1
_SCRATCH_KEY = STATUS_WORDS  # a key that is never read: writes with nothing to record go here

SATURATION = 0
INF_NAN = 1
MODE_ENV_VAR = "NPU_LOSS_SCALE_SAT_MODE"

_STATE_ATTR = "_npu_loss_scale_emulation_state"

# Functions that build ops run as written when called from code AutoGraph converts (a
# tf.distribute replica function, a tf.function): converting them would gain nothing.
_as_is = tf.autograph.experimental.do_not_convert

_lock = threading.RLock()
_mode = None


# -- overflow mode -------------------------------------------------------------------------------
def _initial_mode():
    raw = os.environ.get(MODE_ENV_VAR)
    if raw is None or raw.strip() == "":
        return SATURATION
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value not in (SATURATION, INF_NAN):
        raise ValueError("environment variable %s must be 0 (saturation) or 1 (INF/NaN); got %r"
                         % (MODE_ENV_VAR, raw))
    return value


def _device_plugin():
    """``npu_plugin`` of the real npu_bridge when the ``npu`` backend is active, else None."""
    return detection.active_device_plugin()


def _emulated_mode():
    global _mode
    if _mode is None:
        _mode = _initial_mode()
    return _mode


@_as_is
def set_device_sat_mode(mode):
    """Selects the overflow mode: 0 = saturation (the Atlas-training default), 1 = INF/NaN.

    Like the device setting, it is per process and is read when graphs are built: set it before
    building the model. On the device (backend ``npu``) the call goes to
    ``npu_bridge.estimator.npu.npu_plugin.set_device_sat_mode`` as well. Returns the previous mode.

    Example::

        previous = set_device_sat_mode(1)      # INF/NaN: saturate() leaves inf and NaN alone
        set_device_sat_mode(previous)
    """
    global _mode
    if isinstance(mode, bool) or mode not in (SATURATION, INF_NAN):
        raise ValueError("mode must be 0 (saturation) or 1 (INF/NaN); got %r" % (mode,))
    plugin = _device_plugin()
    previous = _mode_of(plugin)
    _mode = int(mode)
    if plugin is not None:
        plugin.set_device_sat_mode(int(mode))
    return previous


def _mode_of(plugin):
    if plugin is not None:
        return INF_NAN if plugin.is_inf_nan_enabled() else SATURATION
    return _emulated_mode()


@_as_is
def get_device_sat_mode():
    """The current overflow mode: 0 = saturation, 1 = INF/NaN (the device's, on backend npu)."""
    return _mode_of(_device_plugin())


@_as_is
def is_inf_nan_enabled():
    """True in INF/NaN mode (IEEE results), False in saturation mode."""
    return get_device_sat_mode() == INF_NAN


# -- per-graph state -----------------------------------------------------------------------------
class _State:
    """What the emulation keeps for one graph (or for eager execution)."""

    def __init__(self):
        self.registers = {}        # replica id -> MutableHashTable
        self.forward_events = []   # (saturated tensor, overflowed?, nan seen?) made in this graph
        self.step_starts = {}      # replica id -> op that starts the step being built


_eager_state = _State()


def _state_of(graph):
    """The emulation state of ``graph`` (None = eager), stored on the graph so it dies with it."""
    if graph is None:
        return _eager_state
    state = getattr(graph, _STATE_ATTR, None)
    if state is None:
        with _lock:
            state = getattr(graph, _STATE_ATTR, None)
            if state is None:
                state = _State()
                setattr(graph, _STATE_ATTR, state)
    return state


def _current_graph():
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


def _replica_id():
    """Which local replica of a tf.distribute strategy is building ops (0 if only one is local).

    Each Ascend device has its own register, so each replica this process runs gets its own
    emulated register: with a shared one, one replica's clear could erase another replica's
    overflow. A process with a single local replica (one worker of a multi-worker strategy, or no
    strategy) has one register, used from replica and cross-replica contexts alike.
    """
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return 0
    local = len(tf.distribute.get_strategy().extended.worker_devices or ())
    if local <= 1:
        return 0
    context = tf.distribute.get_replica_context()
    value = None if context is None else tf.get_static_value(context.replica_id_in_sync_group)
    return int(value) % local if value is not None else 0


# -- the register --------------------------------------------------------------------------------
def _register():
    """The register the ops being built use: a small int32 -> int32 mutable hash table.

    It lives in the outermost graph (the one ``tf.init_scope`` reaches: the v1 graph, or eager
    execution for ``tf.function``s), so every function, cond branch and loop body of a graph
    shares it. A hash table rather than a variable: it needs no initializer (scripts that only run
    ``global_variables_initializer`` keep working) and is not written into checkpoints, so a
    checkpoint made with or without emulation restores either way.
    """
    replica = _replica_id()
    with tf.init_scope():
        outer = _current_graph()
        state = _state_of(outer)
        table = state.registers.get(replica)
        if table is None:
            with _lock:
                table = state.registers.get(replica)
                if table is None:
                    with tf.control_dependencies(None), tf.device("/device:CPU:0"):
                        table = tf.lookup.experimental.MutableHashTable(
                            key_dtype=tf.int32, value_dtype=tf.int32, default_value=0,
                            checkpoint=False, name="npu_float_status_register")
                    state.registers[replica] = table
    return table


def _word_keys():
    return tf.range(STATUS_WORDS, dtype=tf.int32)


def _step_start_here():
    """The start op of the training step whose gradients are being built in this graph, if any."""
    graph = _current_graph()
    if graph is None:
        return None
    start = _state_of(graph).step_starts.get(_replica_id())
    if start is None:
        return None
    # Inside a TF1 while loop or cond, leave ordering to the control-flow construct.
    get_context = getattr(graph, "_get_control_flow_context", None)
    if get_context is not None and get_context() is not None:
        return None
    return start


@_as_is
def record(overflowed, nan_seen=None):
    """Sets the register's overflow word if ``overflowed`` (and its NaN word if ``nan_seen``).

    Writes are branch-free and can only set words, never clear them, so concurrent writers
    cannot lose an overflow. A record built while a training step's gradients are being built
    (between ``begin_step`` and ``observe_scaled_gradients`` of the emulation backend) runs after
    that step's clear. Returns the op.
    """
    table = _register()
    flags = [tf.convert_to_tensor(overflowed, tf.bool)]
    words = [_OVERFLOW_WORD]
    if nan_seen is not None:
        flags.append(tf.convert_to_tensor(nan_seen, tf.bool))
        words.append(_NAN_WORD)
    start = _step_start_here()
    with tf.control_dependencies([start] if start is not None else []):
        keys = tf.where(tf.stack(flags), tf.constant(words, tf.int32),
                        tf.fill([len(words)], tf.constant(_SCRATCH_KEY, tf.int32)))
        return table.insert(keys, tf.ones([len(words)], tf.int32), name="record_float_status")


@_as_is
def npu_get_float_status_v2(name=None):
    """Reads the register: an int32[8] tensor, all zero when nothing overflowed since the clear.

    As with the device op, ordering is the caller's: build it under
    ``tf.control_dependencies(gradients)`` to read after the gradients exist.
    """
    return tf.identity(_register().lookup(_word_keys()), name=name or "npu_get_float_status_v2")


@_as_is
def npu_clear_float_status_v2(name=None):
    """Clears the register (all eight words to zero). Returns the op."""
    return _register().insert(_word_keys(), tf.zeros([STATUS_WORDS], tf.int32),
                              name=name or "npu_clear_float_status_v2")


@_as_is
def npu_alloc_float_status(name=None):
    """Allocates a status buffer for the v1 protocol: float32[8] zeros (the register is untouched)."""
    return tf.zeros([STATUS_WORDS], tf.float32, name=name or "npu_alloc_float_status")


@_as_is
def npu_get_float_status(x, name=None):
    """v1 protocol: reads the register into a buffer shaped like ``x`` (float32), after ``x``."""
    x = tf.convert_to_tensor(x, tf.float32)
    with tf.control_dependencies([x]):
        words = tf.cast(npu_get_float_status_v2(), tf.float32)
        return tf.reshape(words, tf.shape(x), name=name or "npu_get_float_status")


@_as_is
def npu_clear_float_status(x, name=None):
    """v1 protocol: clears the register after ``x``; returns zeros shaped like the buffer ``x``."""
    x = tf.convert_to_tensor(x, tf.float32)
    with tf.control_dependencies([x]):
        cleared = npu_clear_float_status_v2()
    with tf.control_dependencies([cleared]):
        return tf.zeros_like(x, name=name or "npu_clear_float_status")


# -- saturation arithmetic -----------------------------------------------------------------------
def _saturate_values(x):
    """(saturated x, overflowed?, nan seen?) for a floating tensor, in saturation mode.

    A value of the tensor's own dtype that overflowed is ±inf, so clipping to ±MAX maps exactly
    the overflowed values (and nothing else) to ±MAX.
    """
    big = tf.constant(x.dtype.max, x.dtype)
    nan = tf.math.is_nan(x)
    y = tf.clip_by_value(tf.where(nan, tf.zeros_like(x), x), -big, big)
    return y, tf.reduce_any(tf.math.is_inf(x)), tf.reduce_any(nan)


def _check_floating(name, x):
    if not x.dtype.is_floating:
        raise TypeError("%s must be a floating-point tensor (float16, bfloat16, float32 or "
                        "float64); got dtype %s" % (name, x.dtype.name))


@_as_is
def saturate(x, name=None):
    """Applies Ascend saturation-mode arithmetic to ``x`` and to the gradient flowing back.

    In saturation mode (the default): values beyond the dtype's range become ±MAX of the dtype
    (±65504 for float16), NaN becomes 0, and each such event — on the forward value or on the
    gradient during backpropagation — sets the emulated float-status register. In INF/NaN mode
    (``set_device_sat_mode(1)``), and on the real device (backend ``npu``, which saturates by
    itself), ``x`` and its gradient pass through unchanged.

    Place it where the device would saturate: after every float16 op, or at least after the ops
    that can overflow. :mod:`npu_loss_scale.saturation` does that for a layer, a function or
    every float16 op of a graph you build.

    Example::

        y = saturate(tf.cast([1e5, -1e5, float("nan"), 3.0], tf.float16))
        # y == [65504, -65504, 0, 3], and npu_get_float_status_v2() is now non-zero
    """
    x = tf.convert_to_tensor(x)
    _check_floating("x", x)
    if _device_plugin() is not None or is_inf_nan_enabled():
        return tf.identity(x, name=name)
    return _saturate(x, name=name)


@_as_is
def _saturate(x, name=None):
    """Saturation regardless of mode and backend (the arithmetic of a device in saturation mode)."""
    with tf.name_scope(name or "saturate"):
        return _saturate_with_grad(x)


def _saturate_gradient(dy):
    if isinstance(dy, tf.IndexedSlices):
        return tf.IndexedSlices(_saturate_gradient(dy.values), dy.indices, dy.dense_shape)
    dy = tf.convert_to_tensor(dy)
    dy_sat, over, nan = _saturate_values(dy)
    with tf.control_dependencies([record(over, nan)]):
        return tf.identity(dy_sat)


@tf.custom_gradient
def _saturate_with_grad(x):
    y, over, nan = _saturate_values(x)
    with tf.control_dependencies([record(over, nan)]):
        y = tf.identity(y)
    if not tf.executing_eagerly():
        _state_of(y.graph).forward_events.append((y, over, nan))
    return y, _saturate_gradient


# -- training-step boundaries (used by the emulation detection backend) --------------------------
@_as_is
def forward_events_feeding(tensors):
    """The forward saturation events (overflow, nan) of this graph that feed ``tensors``.

    The optimizer clears the register when a training step's gradient computation starts; events
    of that step's own forward pass, which may already have run, are folded back in so they are
    not lost (see :func:`clear_keeping`). Events of unrelated subgraphs (an evaluation tower) are
    left out, so their overflow is not blamed on the training step.
    """
    tensors = [t for t in tensors if isinstance(t, tf.Tensor) and not _is_eager_tensor(t)]
    if not tensors:
        return []
    events = _state_of(tensors[0].graph).forward_events
    if not events:
        return []
    wanted = _ancestor_op_ids(tensors)
    return [(over, nan) for (y, over, nan) in events if id(y.op) in wanted]


def _is_eager_tensor(t):
    try:
        t.graph  # pylint: disable=pointless-statement
    except AttributeError:
        return True
    return False


def _ancestor_op_ids(tensors):
    seen = set()
    stack = [t.op for t in tensors]
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


@_as_is
def clear_keeping(events, name=None):
    """Clears the register, then leaves set the words of the given forward ``events``.

    The op reads the events, so it runs after the forward pass that produced them.
    """
    if not events:
        return npu_clear_float_status_v2(name=name)
    over = tf.reduce_any(tf.stack([e[0] for e in events]))
    nan = tf.reduce_any(tf.stack([e[1] for e in events]))
    words = tf.concat([tf.cast(tf.stack([over, nan]), tf.int32),
                       tf.zeros([STATUS_WORDS - 2], tf.int32)], axis=0)
    return _register().insert(_word_keys(), words, name=name or "npu_clear_float_status_v2")


@_as_is
def start_step(op):
    """Orders after ``op`` every record built in this graph until :func:`end_step`.

    The emulation backend calls it with the op that clears the register at the start of a
    training step, and :func:`end_step` once that step's gradients are built: a saturation event
    of the backward pass (which may not otherwise depend on the clear) cannot run before the
    clear and be erased by it. Records built later (an evaluation tower) stay independent.
    """
    graph = _current_graph()
    if graph is not None and op is not None:
        _state_of(graph).step_starts[_replica_id()] = op


@_as_is
def end_step():
    """Ends what :func:`start_step` started (no-op if nothing was started)."""
    graph = _current_graph()
    if graph is not None:
        _state_of(graph).step_starts.pop(_replica_id(), None)


def floating_values(grads):
    """The value tensors of the floating-point gradients in ``grads`` (None entries skipped;
    the ``values`` of an ``IndexedSlices``)."""
    for g in grads:
        if g is None:
            continue
        values = g.values if isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g)
        if values.dtype.is_floating:
            yield values


@_as_is
def record_scaled_gradients(grads):
    """Records, as the device would during backpropagation, overflow in scaled gradients.

    A gradient that is non-finite or holds ±MAX of its dtype counts as an overflow: in
    saturation mode ±MAX is what an overflowed op leaves behind. Returns the op, or None when
    there is nothing to look at.
    """
    checks = []
    for values in floating_values(grads):
        # |g| < MAX is False for ±MAX, ±inf and NaN alike: one comparison covers all three.
        in_range = tf.less(tf.abs(values), tf.constant(values.dtype.max, values.dtype))
        checks.append(tf.reduce_all(in_range))
    if not checks:
        return None
    return record(tf.logical_not(tf.reduce_all(tf.stack(checks))))


def reset_register():
    """Forgets the eager-mode registers (graph registers live and die with their graph).

    ``tf.function``s traced before the reset keep the old register: trace them again.
    """
    with _lock:
        _eager_state.registers.clear()
        _eager_state.step_starts.clear()


# At the end: detection imports this module, and only calls into it, at run time.
from . import detection  # noqa: E402  pylint: disable=wrong-import-position,cyclic-import

__all__ = ["saturate", "set_device_sat_mode", "get_device_sat_mode", "is_inf_nan_enabled",
           "npu_alloc_float_status", "npu_get_float_status", "npu_clear_float_status",
           "npu_get_float_status_v2", "npu_clear_float_status_v2", "record",
           "record_scaled_gradients", "forward_events_feeding", "clear_keeping", "start_step",
           "end_step", "reset_register", "SATURATION", "INF_NAN", "STATUS_WORDS",
           "MODE_ENV_VAR"]
