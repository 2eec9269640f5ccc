"""Overflow localisation: which ops overflowed in a step, in execution order, the first marked.

A loss scaler only learns *that* a step overflowed. The emulation sees every saturation site as
it happens (:func:`npu_loss_scale.device.register.saturate`, :func:`~npu_loss_scale.device.saturation.
saturate_every_op`, the ``precision_mode`` casts of :mod:`npu_loss_scale.device.precision`);
with localisation on, each site also notes, in a small table next to the emulated register,
how large the value was before it saturated. When a loss-scale optimizer reads the register
(the end of the step's overflow check) the table is read out and cleared, and a
:class:`StepOverflowRecord` is made for the step if anything overflowed:

* :func:`last_record`, :func:`records` and :func:`add_listener` give it to Python code;
* :class:`~npu_loss_scale.frontends.hooks.LossScaleHook` puts it in its log line
  (``step 17 skipped: first overflow at .../Softmax (forward, fp16, 3.1e5), 12 sites``) and in
  TensorBoard (``loss_scale/overflow_sites``, text ``loss_scale/first_overflow``);
* :func:`set_report_path` (``python -m npu_loss_scale.emulate --overflow-report FILE``, or the
  device's overflow dump turned on with npu_bridge's ``DumpConfig(enable_dump_debug=True)``)
  writes one JSON line per record.

Enabling it. Localisation is decided when a graph (or a ``tf.function``) is *built*: sites
built while it is off cost nothing and are never recorded. Any of:

* ``localisation.enable()`` / ``localisation.disable()``;
* ``with localisation.localising(): ...`` (build the model inside);
* the environment variable ``NPU_LOSS_SCALE_LOCALISE=1`` (read at import);
* ``python -m npu_loss_scale.emulate --overflow-report report.jsonl script.py``.

``observe`` mode (used by :mod:`npu_loss_scale.tools.advisor`) notes the magnitude at every site on
every step, overflowed or not; :func:`observations` returns the largest seen per site.

Example::

    import tensorflow as tf
    import npu_loss_scale as nls
    from npu_loss_scale import localisation, saturation

    localisation.enable()
    with tf.Graph().as_default():
        with saturation.saturate_every_op():
            x = tf.compat.v1.placeholder(tf.float16, [4])
            w = tf.Variable([1.0, 2.0, 3.0, 4.0])
            y = tf.exp(x * tf.cast(w, tf.float16), name="logits_exp")
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                            nls.FixedLossScaleManager(1.0))
            train = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train, {x: [1.0, 1.0, 1.0, 5.0]})     # exp(20) overflows float16
    record = localisation.last_record()
    print(record.first)   # logits_exp (forward, float16, inf)

What a site reports: ``op_name`` (the op whose output saturated; for the gradient flowing back
into a saturated tensor, the forward op it belongs to), ``direction`` (``backward`` for ops built
by ``tf.gradients`` / ``GradientTape`` and for gradients flowing back into a saturated tensor),
``dtype`` and ``magnitude``: the largest absolute value before saturation. Where the value was
computed wider and rounded to float16 (the ``precision_mode`` casts, the BERT example's float16
boundaries) that is the wide value, e.g. ``3.1e5``; an op that computed in float16 itself can
only show ``inf`` (its value never existed in range); NaN is reported as ``nan``.

Order: sites are numbered as they are built, which is a topological order of the graph (forward
ops before the backward ops, the backward ops in the order they run), so ``order`` and ``first``
follow data dependencies: the first site is one no other overflowed site of the step feeds.
If a site overflows several times within one step (a loop), the last magnitude is kept.

A step's record closes at the register read of a loss-scale optimizer (or, in a graph without
one, at ``npu_get_float_status_v2``); ``skipped`` is whether that read saw an overflow (None for
a bare ``npu_get_float_status_v2`` read, whose consequence is the script's). A device clear
(``npu_clear_float_status_v2``) discards the sites noted before it, as it clears the register.

Limits: graphs only (``tf.compat.v1`` graphs and ``tf.function``s; not XLA-compiled
functions: the read-out runs a Python function). Off: nothing is added to any graph.
"""
import collections
import math
import os
import re
import threading

import numpy as np
import tensorflow as tf

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal import kernels as _kernels
from npu_loss_scale._internal.compat import py_func
from npu_loss_scale._internal.compat.lookup import MutableHashTable
from npu_loss_scale._internal.compat.ops import where
from npu_loss_scale.device.overflow_report import (  # noqa: F401  (re-exported)
    OverflowSite, SiteObservation, StepOverflowRecord, append, per_rank as _per_rank,
    read_report, report_path, set_report_path)   # _per_rank: its name here before the move
from npu_loss_scale.device.localisation_mode import (  # noqa: F401  (re-exported)
    ENV_VAR, OBSERVE, OFF, OVERFLOW, _initial_mode, disable, enable, enabled, get_mode,
    localising, set_mode)   # the switch; _initial_mode: its name here before the move

MAX_RECORDS = 1000   # records kept in memory (the report file keeps all of them)

_lock = threading.RLock()
_SCRATCH = -1                     # key of writes with nothing to note
_BACKWARD_SCOPE = re.compile(r"(^|/)(gradients(_\d+)?|gradient_tape)/")

_as_is = _graphs.as_is


# -- sites and their notes in the graph --------------------------------------------------------------
_sites = []            # site id -> (op_name, direction, dtype)
_TABLE_ATTR = "_npu_loss_scale_overflow_sites"


def direction_of(op_name):
    """"backward" for an op built by ``tf.gradients`` / ``GradientTape``, else "forward"."""
    return "backward" if _BACKWARD_SCOPE.search(op_name or "") else "forward"


def _new_site(op_name, direction, dtype):
    with _lock:
        _sites.append((op_name, direction, dtype))
        return len(_sites) - 1


def _table():
    """The site table of the current outermost graph (and replica): int64 key -> float64."""
    replica = _graphs.replica_id()
    outer = _graphs.outermost_graph()
    holder = _eager_tables if outer is None else outer
    tables = getattr(holder, _TABLE_ATTR, None)
    if tables is None:
        tables = {}
        setattr(holder, _TABLE_ATTR, tables)
    table = tables.get(replica)
    if table is None:
        with _lock:
            table = tables.get(replica)
            if table is None:
                with _graphs.outer_scope(outer), tf.device("/device:CPU:0"):
                    table = MutableHashTable(
                        key_dtype=tf.int64, value_dtype=tf.float64, default_value=0.0,
                        checkpoint=False, name="npu_overflow_sites")
                tables[replica] = table
    return table


class _EagerTables:  # pylint: disable=too-few-public-methods
    """Holds the site tables of eager execution (``tf.function``s traced from eager code)."""


_eager_tables = _EagerTables()


def reset():
    """Forgets records, observations, the step counter and the eager site tables."""
    with _lock:
        _records.clear()
        _observed.clear()
        _step[0] = 0
        setattr(_eager_tables, _TABLE_ATTR, {})


_MAGNITUDE_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def _magnitude(source, needed):
    """float64 scalar: max |source|; inf if any inf, nan if a NaN and no inf. ``needed`` (a
    scalar bool): whether the value is read; with the package's kernels loaded the magnitude is
    one op (``NlsMagnitude``) that reads ``source`` only then, else 0."""
    fused = _kernels.load_unscale_check() if source.dtype in _MAGNITUDE_DTYPES else None
    if fused is not None:
        return fused.nls_magnitude(source, needed)
    wide = tf.float64 if source.dtype == tf.float64 else tf.float32
    a = tf.abs(tf.cast(source, wide))
    nan = tf.math.is_nan(a)
    m = tf.reduce_max(where(nan, tf.zeros_like(a), a))
    m = tf.maximum(m, tf.zeros_like(m))   # an empty tensor: 0, not -inf
    m = where(tf.logical_and(tf.reduce_any(nan), tf.math.is_finite(m)),
                 tf.constant(float("nan"), wide), m)
    return tf.cast(m, tf.float64)


@_as_is
def note_site(source, overflowed, nan_seen=None, op_name=None, direction=None, dtype=None):
    """Notes a saturation site for localisation; returns the op to run it (None when off).

    ``source`` is the value before saturation (its max |x| is the reported magnitude; give the
    wide value when a float32 result is rounded to float16), ``overflowed`` / ``nan_seen``
    scalar bools (the site overflowed / saw a NaN this step). ``op_name`` defaults to the
    source's op, ``direction`` to :func:`direction_of` it, ``dtype`` to "float16". Put the
    returned op in the control dependencies of the saturated value, as for
    :func:`npu_loss_scale.device.register.record`. Model code with its own float16 boundaries (see
    ``examples/bert/bert_modeling.py``) calls it to take part in localisation.
    """
    mode = get_mode()
    if mode == OFF or tf.executing_eagerly():
        return None   # off, or eager ops run one by one (localisation is for graphs)
    source = tf.convert_to_tensor(source)
    if op_name is None:
        op_name = source.op.name
    if direction is None:
        direction = direction_of(op_name)
    if direction not in ("forward", "backward"):
        raise ValueError("direction must be 'forward' or 'backward'; got %r" % (direction,))
    dtype = tf.as_dtype(dtype or tf.float16).name
    site = _new_site(op_name, direction, dtype)
    table = _table()
    with tf.name_scope("overflow_site"):
        flag = tf.convert_to_tensor(overflowed, tf.bool)
        if nan_seen is not None:
            flag = tf.logical_or(flag, tf.convert_to_tensor(nan_seen, tf.bool))
        observe = mode == OBSERVE   # the magnitude of every step, else of overflowed ones
        magnitude = _magnitude(source, tf.constant(True) if observe else flag)
        over_key = where(flag, tf.constant(2 * site + 1, tf.int64),
                            tf.constant(_SCRATCH, tf.int64))
        if observe:
            keys = tf.stack([tf.constant(2 * site, tf.int64), over_key])
            values = tf.stack([magnitude, magnitude])
        else:
            keys, values = over_key[None], magnitude[None]
        return table.insert(keys, values, name="note_overflow_site")


# -- the step boundary -------------------------------------------------------------------------------
_records = collections.deque(maxlen=MAX_RECORDS)
_listeners = []
_step = [0]
_observed = {}         # site id -> [max magnitude, steps seen, steps overflowed]
_observed_steps = [0]


@_as_is
def step_boundary(status, decides_skip=True):
    """Builds the read-out of the site table at a register read; returns an op (None when off).

    ``status`` is the register words just read. Called by the emulation's register reads; the
    caller orders it like the read (same control dependencies) and makes the read wait for it.
    """
    if get_mode() == OFF:
        return None
    table = _table()
    with tf.name_scope("overflow_sites_readout"):
        keys, values = table.export()
        with tf.control_dependencies([keys, values]):
            removed = table.remove(keys)
        with tf.control_dependencies([removed]):
            flag = tf.reduce_any(tf.not_equal(status, 0))
            done = py_func.numpy_function(
                lambda k, v, f: _close_step(k, v, bool(f), decides_skip),
                [keys, values, flag], tf.int64, stateful=True, name="close_overflow_step")
    return done


@_as_is
def discard_notes():
    """Builds the clear of the site table that goes with a device clear (None when off)."""
    if get_mode() == OFF:
        return None
    table = _table()
    keys, _ = table.export()
    return table.remove(keys, name="discard_overflow_sites")


def _close_step(keys, values, overflowed, decides_skip):
    keys = np.asarray(keys).reshape(-1)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    with _lock:
        _step[0] += 1
        step = _step[0]
        over = {}
        seen = {}
        for key, value in zip(keys.tolist(), values.tolist()):
            if key < 0:
                continue
            (over if key % 2 else seen)[key // 2] = value
        if seen:
            _observed_steps[0] += 1
            for site, value in seen.items():
                entry = _observed.setdefault(site, [0.0, 0, 0])
                if math.isnan(value) or math.isnan(entry[0]):
                    entry[0] = float("nan") if math.isnan(value) else entry[0]
                else:
                    entry[0] = max(entry[0], value)
                entry[1] += 1
                entry[2] += 1 if site in over else 0
        if not over and not overflowed:
            return np.int64(step)
        sites = []
        for order, site in enumerate(sorted(over)):
            op_name, direction, dtype = _sites[site]
            sites.append(OverflowSite(op_name, direction, dtype, over[site], order, order == 0))
        record = StepOverflowRecord(step, sites, bool(overflowed) if decides_skip else None)
        _records.append(record)
        listeners = list(_listeners)
        append(record)
    for listener in listeners:
        listener(record)
    return np.int64(step)


def last_record():
    """The most recent :class:`StepOverflowRecord` of this process, or None."""
    with _lock:
        return _records[-1] if _records else None


def records():
    """The records kept in memory (the last :data:`MAX_RECORDS`), oldest first."""
    with _lock:
        return list(_records)


def steps_seen():
    """How many steps (register reads of a loss-scale optimizer) were read out so far."""
    return _step[0]


def add_listener(fn):
    """Calls ``fn(record)`` for every new record (from the thread running the step)."""
    if not callable(fn):
        raise TypeError("add_listener() takes a callable; got %r" % (fn,))
    with _lock:
        _listeners.append(fn)


def remove_listener(fn):
    with _lock:
        if fn in _listeners:
            _listeners.remove(fn)


# -- observations (for the advisor) --------------------------------------------------------------------
def observations():
    """Per site noted in ``observe`` mode: :class:`SiteObservation`, in execution order."""
    with _lock:
        return [SiteObservation(site, *_sites[site], *_observed[site])
                for site in sorted(_observed)]


def observed_steps():
    """Steps read out in ``observe`` mode."""
    return _observed_steps[0]


def clear_observations():
    with _lock:
        _observed.clear()
        _observed_steps[0] = 0


def enable_for_device_dump(dump_path=None, file_name="overflow_report.jsonl"):
    """What npu_bridge's ``DumpConfig(enable_dump_debug=True)`` does on CPU: localisation on for
    graphs built from now on, and (unless a report is already being written) the JSON-lines
    report written to ``dump_path/overflow_report.jsonl`` (the current folder without a path).
    Returns the report path."""
    if get_mode() == OFF:
        set_mode(OVERFLOW)
    if report_path() is None:
        set_report_path(os.path.join(dump_path or os.curdir, file_name))
    return report_path()


__all__ = ["OverflowSite", "StepOverflowRecord", "SiteObservation", "last_record", "records",
           "enable", "disable", "enabled", "localising", "set_mode", "get_mode", "note_site",
           "set_report_path", "report_path", "read_report", "add_listener", "remove_listener",
           "observations", "observed_steps", "clear_observations", "steps_seen", "reset",
           "direction_of", "enable_for_device_dump", "ENV_VAR", "OFF",
           "OVERFLOW", "OBSERVE"]
