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
  (:mod:`npu_loss_scale.device.saturation` applies it to whole models);
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

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal import probe
from npu_loss_scale._internal.compat import tape
from npu_loss_scale._internal.compat.lookup import MutableHashTable
from npu_loss_scale._internal.compat.ops import where
from npu_loss_scale.device import localisation


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
MODE_NAMES = {"saturation": SATURATION, "inf_nan": INF_NAN}


def _initial_mode():
    """The mode ``$NPU_LOSS_SCALE_SAT_MODE`` names, by number or name; saturation if unset."""
    raw = os.environ.get(MODE_ENV_VAR)
    if raw is None or raw.strip() == "":
        return SATURATION
    value = MODE_NAMES.get(raw.strip().lower())
    if value is None:
        try:
            value = int(raw)
        except ValueError:
            value = None
    if value not in (SATURATION, INF_NAN):
        raise ValueError("environment variable %s must be 0 or saturation, 1 or inf_nan; got %r"
                         % (MODE_ENV_VAR, raw))
    return value


def _device_plugin():
    """``npu_plugin`` of the real npu_bridge when the ``npu`` backend is active, else None."""
    return probe.active_device_plugin()


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
    """What the emulation keeps for one outermost graph (or for eager execution)."""

    def __init__(self):
        self.registers = {}        # replica id -> MutableHashTable
        self.next_reader = 1       # the next reader slot handed out (slot 0 is the device view)


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


# -- the register --------------------------------------------------------------------------------
# The emulated register has READER_SLOTS copies ("slots") of the eight status words. Every
# overflow sets its word in all slots. Slot 0 is the device's register as scripts see it
# (npu_get_float_status_v2 reads it); each loss-scale optimizer reads and clears a slot of its
# own, so two optimizers whose train ops run in one session.run both see every overflow since
# their own previous read (on the device they would race for one register). A device clear
# (npu_clear_float_status_v2, clear_overflow_status) clears every slot.
READER_SLOTS = 16


@_as_is
def _register():
    """The register the ops being built use: a small int32 -> int32 mutable hash table.

    It lives in the outermost graph (the v1 graph a session runs, or eager execution for
    ``tf.function``s; see :mod:`npu_loss_scale._internal.graphs`), so every function, cond branch and loop
    body of a graph shares it. A hash table rather than a variable: it needs no initializer
    (scripts that only run ``global_variables_initializer`` keep working) and is not written into
    checkpoints, so a checkpoint made with or without emulation restores either way.
    """
    replica = _graphs.replica_id()
    outer = _graphs.outermost_graph()
    state = _state_of(outer)
    table = state.registers.get(replica)
    if table is None:
        with _lock:
            table = state.registers.get(replica)
            if table is None:
                with _graphs.outer_scope(outer), tf.device("/device:CPU:0"):
                    table = MutableHashTable(
                        key_dtype=tf.int32, value_dtype=tf.int32, default_value=0,
                        checkpoint=False, name="npu_float_status_register")
                state.registers[replica] = table
    return table


def allocate_reader_slot():
    """A register slot of its own for one reader (a loss-scale optimizer) in this graph.

    In a graph the slot starts clear with the graph's register. In eager execution (where the
    register lives as long as the process) the slot is cleared now: the new reader sees the
    overflows from its creation on.
    """
    outer = _graphs.outermost_graph()
    state = _state_of(outer)
    with _lock:
        slot = state.next_reader
        state.next_reader = slot + 1 if slot + 1 < READER_SLOTS else 1
    if outer is None:
        with tf.init_scope():
            clear_slot(slot)
    return slot


def _slot_keys(slot):
    return tf.range(slot * STATUS_WORDS, (slot + 1) * STATUS_WORDS, dtype=tf.int32)


def _all_keys():
    return tf.range(READER_SLOTS * STATUS_WORDS, dtype=tf.int32)


_SCRATCH = READER_SLOTS * STATUS_WORDS  # a key that is never read


@_as_is
def record(overflowed, nan_seen=None):
    """Sets the register's overflow word if ``overflowed`` (and its NaN word if ``nan_seen``).

    Writes are branch-free and can only set words, never clear them, so concurrent writers
    cannot lose an overflow. The register is sticky: what is recorded stays until a read of a
    loss-scale optimizer (its own slot) or a device clear. Returns the op.
    """
    table = _register()
    flags = [tf.convert_to_tensor(overflowed, tf.bool)]
    words = [_OVERFLOW_WORD]
    if nan_seen is not None:
        flags.append(tf.convert_to_tensor(nan_seen, tf.bool))
        words.append(_NAN_WORD)
    keys = [[slot * STATUS_WORDS + w for slot in range(READER_SLOTS)] for w in words]
    keys = where(tf.stack(flags)[:, None], tf.constant(keys, tf.int32),
                    tf.constant(_SCRATCH, tf.int32))
    keys = tf.reshape(keys, [-1])
    return table.insert(keys, tf.ones_like(keys), name="record_float_status")


@_as_is
def read_slot(slot, name=None):
    """Reads one slot of the register: int32[8] (slot 0 is what npu_get_float_status_v2 reads).

    With overflow localisation on (:mod:`npu_loss_scale.device.localisation`), the read also closes the
    step's overflow record: a read of a reader's slot (a loss-scale optimizer) decides whether
    the step is skipped; a read of slot 0 does not say, and closes a step only in a graph
    without a loss-scale optimizer (one that allocated no reader slot).
    """
    words = _register().lookup(_slot_keys(slot))
    readout = None
    if localisation.enabled() and (
            slot != 0 or _state_of(_graphs.outermost_graph()).next_reader == 1):
        readout = localisation.step_boundary(words, decides_skip=slot != 0)
    if readout is not None:
        with tf.control_dependencies([readout]):
            return tf.identity(words, name=name)
    return tf.identity(words, name=name)


@_as_is
def clear_slot(slot, name=None):
    """Clears one slot of the register. Returns the op."""
    return _register().insert(_slot_keys(slot), tf.zeros([STATUS_WORDS], tf.int32), name=name)


@_as_is
def npu_get_float_status_v2(name=None):
    """Reads the register: an int32[8] tensor, all zero when nothing overflowed since the clear.

    As with the device op, ordering is the caller's: build it under
    ``tf.control_dependencies(gradients)`` to read after the gradients exist.
    """
    return read_slot(0, name=name or "npu_get_float_status_v2")


@_as_is
def npu_clear_float_status_v2(name=None):
    """Clears the register (all eight words to zero, for every reader). Returns the op.

    With overflow localisation on, the sites noted so far are discarded with it.
    """
    discard = localisation.discard_notes()
    if discard is not None:
        with tf.control_dependencies([discard]):
            return _register().insert(_all_keys(), tf.zeros([READER_SLOTS * STATUS_WORDS],
                                                            tf.int32),
                                      name=name or "npu_clear_float_status_v2")
    return _register().insert(_all_keys(), tf.zeros([READER_SLOTS * STATUS_WORDS], tf.int32),
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
    y = tf.clip_by_value(where(nan, tf.zeros_like(x), x), -big, big)
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
    that can overflow. :mod:`npu_loss_scale.device.saturation` does that for a layer, a function or
    every float16 op of a graph you build.

    Example::

        y = saturate(tf.cast([1e5, -1e5, float("nan"), 3.0], tf.float16))
        # y == [65504, -65504, 0, 3], and npu_get_float_status_v2() is now non-zero
    """
    x = tf.convert_to_tensor(x)
    _check_floating("x", x)
    if _localising_ieee():
        with tf.name_scope(name or "saturate"):
            return _note_ieee(x)
    if _device_plugin() is not None or is_inf_nan_enabled():
        return tf.identity(x, name=name)
    return _saturate(x, name=name)


@_as_is
def _saturate(x, name=None, site=None, source=None):
    """Saturation regardless of mode and backend (the arithmetic of a device in saturation mode).

    ``site``: the op name overflow localisation reports for this saturation (default: ``x``'s
    op); ``source``: the value before rounding to ``x``'s dtype, whose magnitude localisation
    reports (default ``x``). Both only matter with localisation on.
    """
    with tf.name_scope(name or "saturate"):
        return _saturate_with_grad(x, site, source)


_internal = threading.local()


def building_internals():
    """True while the saturation of a gradient is being built in this thread: its own ops
    (clipping constants, selects) are not ops of the model, and
    :func:`~npu_loss_scale.device.saturation.saturate_every_op` leaves them alone."""
    return getattr(_internal, "depth", 0) > 0


def _on_gradient(dy, site, build):
    """``build(dense dy, site)`` for a gradient (None kept; an IndexedSlices' values), with the
    ops it makes marked as internals (see :func:`building_internals`)."""
    if dy is None:
        return None
    if isinstance(dy, tf.IndexedSlices):
        return tf.IndexedSlices(_on_gradient(dy.values, site, build), dy.indices, dy.dense_shape)
    dy = tf.convert_to_tensor(dy)
    depth = getattr(_internal, "depth", 0)
    _internal.depth = depth + 1
    try:
        return build(dy, site)
    finally:
        _internal.depth = depth


def _saturate_dense_gradient(dy, site):
    dy_sat, over, nan = _saturate_values(dy)
    deps = [record(over, nan)]
    if localisation.enabled() and not tf.executing_eagerly():
        deps.append(localisation.note_site(dy, over, nan, op_name=site or dy.op.name,
                                           direction="backward", dtype=dy.dtype))
    with tf.control_dependencies(deps):
        return tf.identity(dy_sat)


def _saturate_gradient(dy, site=None):
    return _on_gradient(dy, site, _saturate_dense_gradient)


# One gradient function for every saturate() in every graph, registered once. (tf.custom_gradient
# registers a new one per call in graph mode, and TensorFlow's registry keeps each alive for
# ever, with the graph it closes over.) The forward pass builds IdentityN([y, x]) under a gradient
# override: output 0 is the saturated value, and the gradient reaching it goes to x, saturated.
_GRADIENT_NAME = "NpuLossScaleSaturate"


def _backward(dy, unused_dx=None, site=None):  # pylint: disable=unused-argument
    return [None, _saturate_gradient(dy, site)]


@tf.RegisterGradient(_GRADIENT_NAME)
def _saturate_registered_gradient(op, dy, dx):  # pylint: disable=unused-argument
    return _backward(dy, site=op.inputs[1].op.name if localisation.enabled() else None)


def _record_on_tape(outputs, inputs, site):
    tape.record_operation("NpuLossScaleSaturate", outputs, inputs,
                          lambda dy, dx=None: _backward(dy, dx, site))


def _saturate_with_grad(x, site=None, source=None):
    y, over, nan = _saturate_values(x)
    deps = [record(over, nan)]
    if localisation.enabled() and not tf.executing_eagerly():
        if source is None and x.op.type == "Cast" and x.op.inputs[0].dtype.is_floating \
                and x.op.inputs[0].dtype.size > x.dtype.size:
            source = x.op.inputs[0]   # a rounding cast: the magnitude of the wide value
        site = site or (x.op.name if source is None else source.op.name)
        deps.append(localisation.note_site(x if source is None else source, over, nan,
                                           op_name=site, dtype=x.dtype))
    with tf.control_dependencies(deps):
        y = tf.identity(y)
    if tf.executing_eagerly():
        return _eager_saturate(x, y)
    graph = tf.compat.v1.get_default_graph()
    with graph.gradient_override_map({"IdentityN": _GRADIENT_NAME}):
        out = tf.raw_ops.IdentityN(input=[tf.stop_gradient(y), x])
    _record_on_tape(out, [y, x], site)
    return out[0]


# -- INF/NaN mode with overflow localisation on ---------------------------------------------------
# In INF/NaN mode values pass unchanged and the register is left alone; with localisation on, a
# place where the device would have saturated still notes its site (an inf or a NaN there, on the
# forward value or on the gradient flowing back), so an overflowed step gets the same record.
_IEEE_GRADIENT_NAME = "NpuLossScaleNoteIeee"


def _localising_ieee():
    """True while building a graph in INF/NaN mode with overflow localisation on (emulation)."""
    return (localisation.enabled() and is_inf_nan_enabled() and _device_plugin() is None
            and not tf.executing_eagerly())


def _ieee_note(value, source, site, direction):
    flag_inf = tf.reduce_any(tf.math.is_inf(value))
    flag_nan = tf.reduce_any(tf.math.is_nan(value))
    return localisation.note_site(source, flag_inf, flag_nan, op_name=site, direction=direction,
                                  dtype=value.dtype)


@_as_is
def _note_ieee(x, site=None, source=None):
    """``x`` unchanged (INF/NaN mode), its site noted for localisation, forward and backward."""
    if source is None and x.op.type == "Cast" and x.op.inputs[0].dtype.is_floating \
            and x.op.inputs[0].dtype.size > x.dtype.size:
        source = x.op.inputs[0]   # a rounding cast: the magnitude of the wide value
    site = site or (x.op.name if source is None else source.op.name)
    note = _ieee_note(x, x if source is None else source, site, None)
    with tf.control_dependencies([note]):
        y = tf.identity(x)
    graph = tf.compat.v1.get_default_graph()
    with graph.gradient_override_map({"IdentityN": _IEEE_GRADIENT_NAME}):
        out = tf.raw_ops.IdentityN(input=[tf.stop_gradient(y), x])
    return out[0]


def _note_dense_ieee_gradient(dy, site):
    note = _ieee_note(dy, dy, site or dy.op.name, "backward")
    with tf.control_dependencies([note] if note is not None else []):
        return tf.identity(dy)


def _note_ieee_gradient(dy, site):
    return _on_gradient(dy, site, _note_dense_ieee_gradient)


@tf.RegisterGradient(_IEEE_GRADIENT_NAME)
def _note_ieee_registered_gradient(op, dy, dx):  # pylint: disable=unused-argument
    return [None, _note_ieee_gradient(dy, op.inputs[1].op.name)]


def _eager_saturate(x, y):
    @tf.custom_gradient
    def passthrough(value):
        return tf.identity(y), lambda dy: _saturate_gradient(dy)
    return passthrough(x)


# -- gradients ---------------------------------------------------------------------------------
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
        _eager_state.next_reader = 1




__all__ = ["saturate", "set_device_sat_mode", "get_device_sat_mode", "is_inf_nan_enabled",
           "npu_alloc_float_status", "npu_get_float_status", "npu_clear_float_status",
           "npu_get_float_status_v2", "npu_clear_float_status_v2", "record",
           "record_scaled_gradients", "reset_register", "READER_SLOTS", "SATURATION", "INF_NAN", "STATUS_WORDS",
           "MODE_ENV_VAR"]
