"""``state_dict()`` / ``load_state_dict()`` over a few scalar variables, eager and graph mode.

Shared by the loss-scale managers and the Megatron grad scalers. A state dict maps a key to a
plain Python number (``float`` for floating variables, ``int`` for integer ones).

* Eager: values are read from and assigned to the variables directly.
* Graph: the variables live in a graph and only a session can read or write them. Pass
  ``session=``; without it the default session (``with sess.as_default():`` or inside
  ``tf.compat.v1.Session()`` used as a context manager) is used; with neither a
  ``RuntimeError`` says so. The variables are those of ``session.graph``, also when called
  outside ``with graph.as_default()`` (where TensorFlow reports eager execution). Loading
  builds its placeholders and assign ops once per graph and reuses them.

Checkpoint restores: :func:`restored_state_check` refuses, at the first step, a restored value
no rule can reach; :mod:`npu_loss_scale._internal.staged` makes a ``tf.train.Checkpoint``
restore of an object's state all or nothing.
"""
import numbers
import weakref

import numpy as np
import tensorflow as tf

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal.compat.ops import where

_CACHE_ATTR = "_npu_loss_scale_state_io_cache"


def _session_or_error(session, owner_name, what):
    if session is None:
        session = tf.compat.v1.get_default_session()
    if session is None:
        raise RuntimeError(
            "%s.%s() in graph mode needs a session to read or write the variables: pass "
            "session=<your tf.compat.v1.Session> (or call it inside `with sess.as_default():`)"
            % (owner_name, what))
    if not isinstance(session, tf.compat.v1.Session) and not hasattr(session, "run"):
        raise TypeError("session must be a tf.compat.v1.Session; got %r (type %s)"
                        % (session, type(session).__name__))
    return session


def _python_value(value, dtype, key=None):
    value = np.asarray(value)
    if value.size != 1:
        raise ValueError("state_dict(): variable %r holds shape %s where a scalar is expected: "
                         "it was restored from a checkpoint that does not match (a "
                         "tf.compat.v1.train.Saver does not check shapes when it restores); "
                         "restore a matching checkpoint or rebuild the graph" % (key, value.shape))
    value = value.reshape(())
    return float(value) if dtype.is_floating else int(value)


def read(owner, variables_fn, session=None):
    """``{key: number}`` of the variables ``variables_fn()`` returns (a key -> variable dict)."""
    if session is None and tf.executing_eagerly():
        named = variables_fn()
        return {k: _python_value(v.numpy(), v.dtype, k) for k, v in named.items()}
    # A session given: its graph's variables, even when called outside that graph (where
    # executing_eagerly() is True and the eager state would be a different, fresh copy).
    session = _session_or_error(session, type(owner).__name__, "state_dict")
    with session.graph.as_default():
        named = variables_fn()
        # Fetching the variables themselves adds no op (a finalized graph works too).
        values = session.run(dict(named))
    return {k: _python_value(values[k], named[k].dtype, k) for k in named}


_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT32_MIN = int(np.iinfo(np.int32).min)
_INT32_MAX = int(np.iinfo(np.int32).max)

#: What a state dict may hold, per key: ``(minimum, min_inclusive, maximum, accepted-text)``.
#: Scales are checked after rounding to float32 (what the variable stores): finite and in
#: ``(0, float32 max]`` (an Ascend manager's ``loss_scale`` >= 1, as its constructor demands).
#: Counters are integers that fit int32 and are >= 0, except ``hysteresis_tracker`` which Megatron
#: lets go below zero.
LIMITS = {
    "scale": (0.0, False, _FLOAT32_MAX,
              "a finite number > 0 and <= 3.4028235e38 (float32 max)"),
    "loss_scale": (1.0, True, _FLOAT32_MAX,
                   "a finite number >= 1 and <= 3.4028235e38 (float32 max)"),
    "growth_tracker": (0, True, _INT32_MAX, "an integer >= 0 and <= %d (int32)" % _INT32_MAX),
    "good_steps": (0, True, _INT32_MAX, "an integer >= 0 and <= %d (int32)" % _INT32_MAX),
    "bad_steps": (0, True, _INT32_MAX, "an integer >= 0 and <= %d (int32)" % _INT32_MAX),
    "hysteresis_tracker": (_INT32_MIN, True, _INT32_MAX,
                           "an integer >= %d and <= %d (int32; it may be negative, as in "
                           "Megatron)" % (_INT32_MIN, _INT32_MAX)),
    "min_scale_overflow_steps": (0, True, _INT32_MAX,
                                 "an integer >= 0 and <= %d (int32)" % _INT32_MAX),
}


def _default_limits(dtype):
    if dtype.is_floating:
        top = float(dtype.max)
        return (-top, True, top, "a finite number that fits %s" % dtype.name)
    return (int(dtype.min), True, int(dtype.max),
            "an integer >= %d and <= %d (%s)" % (int(dtype.min), int(dtype.max), dtype.name))


def _checked_value(owner_name, key, value, dtype, limits=None):
    """``value`` as a Python number after checking it against ``limits`` (default: the
    :data:`LIMITS` entry of ``key``, else the range of ``dtype``); raises naming the key."""
    minimum, min_inclusive, maximum, accepted = (
        limits or LIMITS.get(key) or _default_limits(dtype))
    where = "%s.load_state_dict(): state_dict[%r]" % (owner_name, key)
    if isinstance(value, (tf.Tensor, tf.Variable)) and hasattr(value, "numpy"):
        value = value.numpy()
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        number = int(value)      # any size: NumPy would make an object array of a huge int
    else:
        array = np.asarray(value)
        if array.size != 1 or not np.issubdtype(array.dtype, np.number) \
                or np.issubdtype(array.dtype, np.complexfloating) or isinstance(value, bool):
            raise TypeError("%s must be %s (a number, or a one-element array or tensor); got "
                            "%r (type %s)" % (where, accepted, value, type(value).__name__))
        number = array.reshape(()).item()
    value_for_message = number
    if dtype.is_floating:
        if isinstance(number, int):
            number = float(number) if abs(number) <= _FLOAT32_MAX * 2 else float("inf")
        with np.errstate(over="ignore", under="ignore"):
            stored = float(np.asarray(number, dtype=dtype.as_numpy_dtype))
        if not np.isfinite(number) or not np.isfinite(stored):
            raise ValueError("%s must be %s; got %r" % (where, accepted, value_for_message))
        result = stored
    else:
        if not isinstance(number, int) and not float(number).is_integer():
            raise ValueError("%s must be %s; got %r" % (where, accepted, value_for_message))
        result = int(number)
    too_low = result < minimum if min_inclusive else result <= minimum
    if too_low or result > maximum:
        raise ValueError("%s must be %s; got %r" % (where, accepted, value_for_message))
    return float(number) if dtype.is_floating else result


def write(owner, variables_fn, state_dict, session=None, limits=None):
    """Assigns ``state_dict``'s values to the variables; every key must be present, no other.

    Every value is checked (see :data:`LIMITS`; ``limits`` maps a key to its own
    ``(minimum, min_inclusive, maximum, accepted-text)``) before any is assigned, so a refused
    state dict changes nothing."""
    owner_name = type(owner).__name__
    if not isinstance(state_dict, dict):
        raise TypeError("%s.load_state_dict() takes a dict; got %r (type %s)"
                        % (owner_name, state_dict, type(state_dict).__name__))
    if session is None and tf.executing_eagerly():
        named = variables_fn()
        values = _checked_values(owner_name, named, state_dict, limits)
        for k, var in named.items():
            var.assign(tf.constant(values[k], dtype=var.dtype))
        return None
    session = _session_or_error(session, owner_name, "load_state_dict")
    graph = session.graph
    with graph.as_default():
        named = variables_fn()
        values = _checked_values(owner_name, named, state_dict, limits)
        cache = owner.__dict__.get(_CACHE_ATTR)
        if cache is None:
            cache = weakref.WeakKeyDictionary()
            owner.__dict__[_CACHE_ATTR] = cache
        built = cache.get(graph)
        if built is None or set(built[0]) != set(named):
            with tf.init_scope(), tf.control_dependencies(None), tf.name_scope("load_state_dict"):
                feeds = {k: tf.compat.v1.placeholder(v.dtype, [], name=k) for k, v in named.items()}
                op = tf.group(*[named[k].assign(feeds[k]) for k in named])
            built = (feeds, op)
            cache[graph] = built
        feeds, op = built
        session.run(op, {feeds[k]: values[k] for k in feeds})
    return None


def _checked_values(owner_name, named, state_dict, limits=None):
    missing = [k for k in named if k not in state_dict]
    unknown = [k for k in state_dict if k not in named]
    if missing or unknown:
        raise KeyError("%s.load_state_dict(): expected the keys %s; missing %s, unknown %s"
                       % (owner_name, sorted(named), sorted(missing), sorted(map(str, unknown))))
    limits = limits or {}
    return {k: _checked_value(owner_name, k, state_dict[k], v.dtype, limits.get(k))
            for k, v in named.items()}


def element_count(value):
    """The number of elements of ``value``, counted from the data: TensorFlow's graph
    optimizer would fold ``tf.size(value)`` to the declared shape of the variable the value is
    read from or assigned to, which a restore does not enforce."""
    flat = tf.reshape(tf.cast(value, tf.float64), [-1])
    finite = tf.math.is_finite(flat)
    return tf.shape(where(tf.logical_or(finite, tf.logical_not(finite))))[0]


@_graphs.as_is   # graph building only: nothing to convert
def restored_state_check(owner_name, named, limits=None):
    """An op that raises ``tf.errors.InvalidArgumentError`` when a state variable holds what its
    owner can never reach: a NaN, inf or out-of-range value, or a shape other than a scalar.

    Constructors and :func:`write` refuse such values, but a checkpoint restore (a name-based
    ``tf.compat.v1.train.Saver``, ``tf.train.Checkpoint``) writes whatever the file holds (a
    Saver does not check shapes either; :class:`StagedState` does for ``tf.train.Checkpoint``). The owner runs this op before its scale is
    used, so the first step after such a restore fails before anything is applied, with a
    message naming the variable, its value and what is accepted. ``named`` maps a checkpoint key
    to its variable; ``limits`` as in :func:`write`. In eager execution it raises right away.
    """
    checks = []
    for key, var in named.items():
        minimum, min_inclusive, maximum, accepted = (
            (limits or {}).get(key) or LIMITS.get(key) or _default_limits(var.dtype))
        value = tf.convert_to_tensor(var)
        flat = tf.reshape(tf.cast(value, tf.float64), [-1])
        finite = tf.math.is_finite(flat)
        count = element_count(value)
        above = flat >= minimum if min_inclusive else flat > minimum
        ok = tf.logical_and(tf.equal(count, 1),
                            tf.reduce_all(finite & above & (flat <= maximum)))
        checks.append(tf.debugging.Assert(
            ok, ["%s: its variable %s holds" % (owner_name, key), value,
                 "which it can never reach (a checkpoint restored an impossible state); "
                 "accepted: a scalar, %s. Restore a checkpoint this object wrote; nothing of "
                 "this step was applied." % accepted], summarize=16,
            name="check_restored_" + key))
    return tf.group(*checks, name="check_restored_state")


__all__ = ["read", "write", "LIMITS", "restored_state_check", "element_count"]
