"""CPU emulation of the Ascend float-status register and of saturation-mode arithmetic.

On an Atlas training device (Ascend 910) running in *saturation mode*, an overflowing result
becomes the extreme value of its dtype (±65504 for float16, ±3.4028235e38 for float32) and NaN
becomes 0. Nothing in the tensors says so; the device instead sets a sticky, device-global
*float-status register* that must be read and cleared explicitly. This module reproduces both:

* a per-graph register with the npu_bridge status-op names (``npu_get_float_status_v2`` and
  friends), sticky until cleared, not saved in checkpoints and needing no initialisation;
* :func:`saturate`, which applies saturation to a tensor on the forward pass and to the gradient
  flowing back through it, and records every overflow in the register;
* the overflow-mode switch (:func:`set_device_sat_mode`, :func:`get_device_sat_mode`,
  :func:`is_inf_nan_enabled`): in INF/NaN mode ``saturate`` leaves IEEE results alone.

Usage on a model you build::

    from npu_loss_scale import emulation
    h = emulation.saturate(tf.matmul(x16, w16))   # wherever the device would saturate

Register words: word 0 is set when a value overflowed to ±MAX, word 1 when a NaN was replaced
by 0; the other six stay 0. "All eight words zero" means "no overflow since the last clear",
exactly as on the device.
"""
import os
import threading
import weakref

import tensorflow as tf


STATUS_WORDS = 8
_OVERFLOW_WORD = 0
_NAN_WORD = 1
_SCRATCH_KEY = STATUS_WORDS  # a key that is never read: writes with nothing to record go here

SATURATION = 0
INF_NAN = 1

_FORWARD_EVENTS = "npu_loss_scale_forward_overflow_events"

_lock = threading.Lock()
_registers = weakref.WeakKeyDictionary()
_eager_register = []
_mode = None


# -- overflow mode -------------------------------------------------------------------------------
def _initial_mode():
    raw = os.environ.get("NPU_LOSS_SCALE_SAT_MODE")
    if raw is None or raw.strip() == "":
        return SATURATION
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value not in (SATURATION, INF_NAN):
        raise ValueError("environment variable NPU_LOSS_SCALE_SAT_MODE must be 0 (saturation) "
                         "or 1 (INF/NaN); got %r" % raw)
    return value


def set_device_sat_mode(mode):
    """Selects the overflow mode: 0 = saturation (the Atlas-training default), 1 = INF/NaN.

    Like the device setting, it is per process and is read when graphs are built: set it before
    building the model. Returns the previous mode.
    """
    global _mode
    if isinstance(mode, bool) or mode not in (SATURATION, INF_NAN):
        raise ValueError("mode must be 0 (saturation) or 1 (INF/NaN); got %r" % (mode,))
    previous = get_device_sat_mode()
    _mode = int(mode)
    return previous


def get_device_sat_mode():
    """The current overflow mode: 0 = saturation, 1 = INF/NaN."""
    global _mode
    if _mode is None:
        _mode = _initial_mode()
    return _mode


def is_inf_nan_enabled():
    """True in INF/NaN mode (IEEE results), False in saturation mode."""
    return get_device_sat_mode() == INF_NAN


# -- the register --------------------------------------------------------------------------------
def _register():
    """The register of the current graph (or of eager execution): a small mutable hash table.

    A hash table rather than a variable: it needs no initializer (scripts that only run
    ``global_variables_initializer`` keep working) and is not written into checkpoints, so a
    checkpoint made with or without emulation restores either way.
    """
    with _lock:
        if tf.executing_eagerly():
            if not _eager_register:
                _eager_register.append(_new_table())
            return _eager_register[0]
        graph = tf.compat.v1.get_default_graph()
        table = _registers.get(graph)
        if table is None:
            with tf.init_scope(), tf.control_dependencies(None):
                table = _new_table()
            _registers[graph] = table
        return table


def _new_table():
    return tf.lookup.experimental.MutableHashTable(
        key_dtype=tf.int32, value_dtype=tf.int32, default_value=0, checkpoint=False,
        name="npu_float_status_register")


def _word_keys():
    return tf.range(STATUS_WORDS, dtype=tf.int32)


def record(overflowed, nan_seen=None):
    """Sets the register's overflow word if ``overflowed`` (and its NaN word if ``nan_seen``).

    Writes are branch-free and can only set words, never clear them, so concurrent writers
    cannot lose an overflow. Returns the op.
    """
    table = _register()
    flags = [tf.convert_to_tensor(overflowed, tf.bool)]
    words = [_OVERFLOW_WORD]
    if nan_seen is not None:
        flags.append(tf.convert_to_tensor(nan_seen, tf.bool))
        words.append(_NAN_WORD)
    keys = tf.where(tf.stack(flags), tf.constant(words, tf.int32),
                    tf.fill([len(words)], tf.constant(_SCRATCH_KEY, tf.int32)))
    return table.insert(keys, tf.ones([len(words)], tf.int32), name="record_float_status")


def npu_get_float_status_v2(name=None):
    """Reads the register: an int32[8] tensor, all zero when nothing overflowed since the clear."""
    return tf.identity(_register().lookup(_word_keys()), name=name or "npu_get_float_status_v2")


def npu_clear_float_status_v2(name=None):
    """Clears the register. Returns the op."""
    return _register().insert(_word_keys(), tf.zeros([STATUS_WORDS], tf.int32),
                              name=name or "npu_clear_float_status_v2")


def npu_alloc_float_status(name=None):
    """Allocates a status buffer for the v1 protocol: float32[8] zeros."""
    return tf.zeros([STATUS_WORDS], tf.float32, name=name or "npu_alloc_float_status")


def npu_get_float_status(x, name=None):
    """v1 protocol: returns the register as float32, shaped like the buffer ``x``."""
    x = tf.convert_to_tensor(x, tf.float32)
    words = tf.cast(npu_get_float_status_v2(), tf.float32)
    with tf.control_dependencies([x]):
        return tf.reshape(words, tf.shape(x), name=name or "npu_get_float_status")


def npu_clear_float_status(x, name=None):
    """v1 protocol: clears the register; returns zeros shaped like the buffer ``x``."""
    x = tf.convert_to_tensor(x, tf.float32)
    with tf.control_dependencies([x, npu_clear_float_status_v2()]):
        return tf.zeros_like(x, name=name or "npu_clear_float_status")


# -- saturation arithmetic -----------------------------------------------------------------------
def _saturate_values(x):
    """(saturated x, overflowed?, nan seen?) for a floating tensor, in saturation mode."""
    big = tf.constant(x.dtype.max, x.dtype)
    nan = tf.math.is_nan(x)
    over = tf.greater(tf.abs(x), big)
    y = tf.clip_by_value(tf.where(nan, tf.zeros_like(x), x), -big, big)
    return y, tf.reduce_any(over), tf.reduce_any(nan)


def _check_floating(name, x):
    if not x.dtype.is_floating:
        raise TypeError("%s must be a floating-point tensor (float16, bfloat16, float32 or "
                        "float64); got dtype %s" % (name, x.dtype.name))


def saturate(x, name=None):
    """Applies Ascend saturation-mode arithmetic to ``x`` and to the gradient flowing back.

    In saturation mode (the default): values beyond the dtype's range become ±MAX of the dtype
    (±65504 for float16), NaN becomes 0, and each such event — on the forward value or on the
    gradient during backpropagation — sets the emulated float-status register. In INF/NaN mode
    (``set_device_sat_mode(1)``) the tensor and its gradient pass through unchanged.

    Example::

        y = saturate(tf.cast(tf.constant([1e5, -1e5, float('nan'), 3.0]), tf.float16))
        # y == [65504, -65504, 0, 3], and npu_get_float_status_v2() is now non-zero
    """
    x = tf.convert_to_tensor(x)
    _check_floating("x", x)
    if is_inf_nan_enabled():
        return tf.identity(x, name=name)
    with tf.name_scope(name or "saturate"):
        return _saturate_with_grad(x)


@tf.custom_gradient
def _saturate_with_grad(x):
    y, over, nan = _saturate_values(x)
    event = tf.logical_or(over, nan)
    with tf.control_dependencies([record(over, nan)]):
        y = tf.identity(y)
    if not tf.executing_eagerly():
        tf.compat.v1.add_to_collection(_FORWARD_EVENTS, (y, event, over, nan))

    def grad(dy):
        dy_sat, g_over, g_nan = _saturate_values(tf.convert_to_tensor(dy))
        with tf.control_dependencies([record(g_over, g_nan)]):
            return tf.identity(dy_sat)

    return y, grad


def forward_events_feeding(tensors):
    """The forward saturation events (overflow, nan) of the current graph that feed ``tensors``.

    The optimizer clears the register when a training step's gradient computation starts; events
    of that step's own forward pass, which may already have run, are folded back in so they are
    not lost. Events of unrelated subgraphs (an evaluation tower) are left out.
    """
    if tf.executing_eagerly():
        return []
    events = tf.compat.v1.get_collection(_FORWARD_EVENTS)
    if not events:
        return []
    wanted = {id(op) for op in _ancestor_ops(tensors)}
    return [(over, nan) for (y, _event, over, nan) in events if id(y.op) in wanted]


def _ancestor_ops(tensors):
    seen = set()
    stack = [t.op for t in tensors if t is not None]
    out = []
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        out.append(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return out


def clear_keeping(events, name=None):
    """Clears the register, then leaves set the words of the given forward ``events``."""
    if not events:
        return npu_clear_float_status_v2(name=name)
    over = tf.reduce_any(tf.stack([e[0] for e in events]))
    nan = tf.reduce_any(tf.stack([e[1] for e in events]))
    words = tf.concat([tf.cast(tf.stack([over, nan]), tf.int32),
                       tf.zeros([STATUS_WORDS - 2], tf.int32)], axis=0)
    return _register().insert(_word_keys(), words, name=name or "npu_clear_float_status_v2")


def record_scaled_gradients(grads):
    """Records, as the device would during backpropagation, overflow in scaled gradients.

    A gradient that is non-finite or holds ±MAX of its dtype counts as an overflow. Returns the
    op, or None when there is nothing to look at.
    """
    checks = []
    for g in grads:
        if g is None:
            continue
        values = g.values if isinstance(g, tf.IndexedSlices) else g
        if not values.dtype.is_floating:
            continue
        big = tf.constant(values.dtype.max, values.dtype)
        bad = tf.logical_or(tf.logical_not(tf.math.is_finite(values)),
                            tf.greater_equal(tf.abs(values), big))
        checks.append(tf.reduce_any(bad))
    if not checks:
        return None
    return record(tf.reduce_any(tf.stack(checks)))


def reset_register():
    """Forgets the eager-mode register (graph registers live and die with their graph)."""
    with _lock:
        del _eager_register[:]


__all__ = ["saturate", "set_device_sat_mode", "get_device_sat_mode", "is_inf_nan_enabled",
           "npu_alloc_float_status", "npu_get_float_status", "npu_clear_float_status",
           "npu_get_float_status_v2", "npu_clear_float_status_v2", "SATURATION", "INF_NAN",
           "STATUS_WORDS"]

