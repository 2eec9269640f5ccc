"""The emulated float-status register itself: eight status words per reader slot, one register
per outermost graph (and per replica of a ``tf.distribute`` strategy, as each device has its own).

The register is a small int32 -> int32 mutable hash table. It needs no initialisation (scripts
that only run ``global_variables_initializer`` keep working) and is not written into checkpoints,
so a checkpoint made with or without emulation restores either way. It is sticky: a word once set
stays set until the slot holding it is cleared.

Register words: word 0 is set when a value overflowed to ±MAX, word 1 when a NaN was replaced by
0; the other six stay 0. "All eight words zero" means "no overflow since the last clear", exactly
as on the device.

The device face of the register (the ``npu_*`` status ops, the overflow mode, :func:`saturate`)
is :mod:`npu_loss_scale.device.register`; saturation arithmetic, which writes here, is
:mod:`npu_loss_scale.device.saturate`.
"""
import threading

import tensorflow as tf

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal.compat.lookup import MutableHashTable
from npu_loss_scale._internal.compat.ops import where
from npu_loss_scale.device import localisation

as_is = _graphs.as_is

STATUS_WORDS = 8
_OVERFLOW_WORD = 0
_NAN_WORD = 1

_STATE_ATTR = "_npu_loss_scale_emulation_state"

_lock = threading.RLock()


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


# -- the register --------------------------------------------------------------------------------
# The emulated register has READER_SLOTS copies ("slots") of the eight status words. Every
# overflow sets its word in all slots. Slot 0 is the device's register as scripts see it
# (npu_get_float_status_v2 reads it); each loss-scale optimizer reads and clears a slot of its
# own, so two optimizers whose train ops run in one session.run both see every overflow since
# their own previous read (on the device they would race for one register). A device clear
# (npu_clear_float_status_v2, clear_overflow_status) clears every slot.
READER_SLOTS = 16

_SCRATCH = READER_SLOTS * STATUS_WORDS  # a key that is never read: writes with nothing to record


@as_is
def _register():
    """The register the ops being built use: a small int32 -> int32 mutable hash table.

    It lives in the outermost graph (the v1 graph a session runs, or eager execution for
    ``tf.function``s; see :mod:`npu_loss_scale._internal.graphs`), so every function, cond branch
    and loop body of a graph shares it.
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


@as_is
def record(overflowed, nan_seen=None):
    """Sets the register's overflow word if ``overflowed`` (and its NaN word if ``nan_seen``).

    Writes are branch-free and can only set words, never clear them, so concurrent writers
    cannot lose an overflow. The register is sticky: what is recorded stays until a read of a
    loss-scale optimizer (its own slot) or a device clear. Returns the op.
    """
    flags = [tf.convert_to_tensor(overflowed, tf.bool)]
    if nan_seen is not None:
        flags.append(tf.convert_to_tensor(nan_seen, tf.bool))
    return record_flags(tf.stack(flags))


def record_flags(flags):
    """:func:`record` of a bool vector: ``[overflowed]`` or ``[overflowed, nan_seen]`` (what the
    saturation kernels give). In a graph it adds two ops (a select of the keys, the insert); the
    constants it reads are made once per graph and control-flow context (a rewrite rounds dozens
    of values, each recorded here)."""
    keys, scratch, ones = _record_constants(tf.compat.dimension_value(flags.shape[0]))
    keys = where(flags, keys, scratch)   # flag w selects column w: word w in every reader slot
    return _register().insert(keys, ones, name="record_float_status")


_CONSTANTS_ATTR = "_npu_loss_scale_record_constants"   # on the graph: dies with it


def _record_constants(words):
    """The constants of a record of ``words`` flags (1 or 2): the keys (column w: word w in
    every reader slot, so that the flags broadcast along the rows), the scratch key and the
    values. Made where no control dependency applies (later records share them); eagerly, made
    each time."""
    def make():
        keys = [[slot * STATUS_WORDS + w for w in (_OVERFLOW_WORD, _NAN_WORD)[:words]]
                for slot in range(READER_SLOTS)]
        return (tf.constant(keys, tf.int32), tf.constant(_SCRATCH, tf.int32),
                tf.ones([READER_SLOTS, words], tf.int32))
    if tf.executing_eagerly():
        return make()
    graph = tf.compat.v1.get_default_graph()
    key = (graph._get_control_flow_context(), words)  # pylint: disable=protected-access
    with _lock:
        made = getattr(graph, _CONSTANTS_ATTR, None)
        if made is None:
            made = {}
            setattr(graph, _CONSTANTS_ATTR, made)
        if key not in made:
            with graph.control_dependencies(None):
                context = graph._get_control_flow_context()  # pylint: disable=protected-access
                graph._set_control_flow_context(key[0])  # pylint: disable=protected-access
                try:
                    with tf.name_scope("npu_float_status_record/"):
                        made[key] = make()
                finally:
                    graph._set_control_flow_context(context)  # pylint: disable=protected-access
        return made[key]


@as_is
def read_slot(slot, name=None):
    """Reads one slot of the register: int32[8] (slot 0 is what npu_get_float_status_v2 reads).

    With overflow localisation on (:mod:`npu_loss_scale.device.localisation`), the read also
    closes the step's overflow record: a read of a reader's slot (a loss-scale optimizer) decides
    whether the step is skipped; a read of slot 0 does not say, and closes a step only in a graph
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


@as_is
def clear_slot(slot, name=None):
    """Clears one slot of the register. Returns the op."""
    return _register().insert(_slot_keys(slot), tf.zeros([STATUS_WORDS], tf.int32), name=name)


@as_is
def clear_all(name):
    """Clears every slot (the device's clear). With overflow localisation on, the sites noted so
    far are discarded with it. Returns the op."""
    discard = localisation.discard_notes()
    zeros = tf.zeros([READER_SLOTS * STATUS_WORDS], tf.int32)
    if discard is not None:
        with tf.control_dependencies([discard]):
            return _register().insert(_all_keys(), zeros, name=name)
    return _register().insert(_all_keys(), zeros, name=name)


def reset_register():
    """Forgets the eager-mode registers (graph registers live and die with their graph).

    ``tf.function``s traced before the reset keep the old register: trace them again.
    """
    with _lock:
        _eager_state.registers.clear()
        _eager_state.next_reader = 1


__all__ = ["STATUS_WORDS", "READER_SLOTS", "allocate_reader_slot", "record", "read_slot",
           "clear_slot", "clear_all", "reset_register"]
