"""``iterations_per_loop`` on CPU: one ``Session.run`` of a marked op runs it N times.

On the device, ``util.set_iteration_per_loop(sess, train_op, N)`` and
``NPURunConfig(iterations_per_loop=N)`` make one ``Session.run`` execute N training steps before
returning to the host. :func:`mark_loop` records an op with its N; once
:func:`install_run_hook` has run, ``Session.run`` whose fetches contain a marked op runs those
fetches N times (same feeds) and returns the values of the last run — N steps per call, as on
the device, so ``global_step`` advances by N and hooks see one call per loop.
"""
import weakref

import tensorflow as tf

_loops = weakref.WeakKeyDictionary()   # graph -> {op name: N}
_patched = []


def mark_loop(op, iterations):
    """Records that running ``op`` (a ``tf.Operation``) means ``iterations`` steps."""
    if not isinstance(op, tf.Operation):
        raise TypeError("op must be a tf.Operation (the train op); got %r (type %s)"
                        % (op, type(op).__name__))
    _loops.setdefault(op.graph, {})[op.name] = int(iterations)
    return op


def _flatten(fetches):
    """The leaves of a fetch structure (lists, tuples, dicts with any keys, namedtuples)."""
    stack = [fetches]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            yield item


def iterations_of(fetches, graph):
    """The largest N among the marked ops in ``fetches`` (1 when none is marked)."""
    marked = _loops.get(graph)
    if not marked:
        return 1
    best = 1
    for item in _flatten(fetches):
        op = item if isinstance(item, tf.Operation) else getattr(item, "op", None)
        if isinstance(op, tf.Operation) and op.name in marked:
            best = max(best, marked[op.name])
    return best


def install_run_hook():
    """Makes ``tf.compat.v1.Session.run`` honour :func:`mark_loop` (idempotent)."""
    if _patched:
        return
    from tensorflow.python.client import session as session_lib  # pylint: disable=import-outside-toplevel
    original = session_lib.BaseSession.run

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        try:
            n = iterations_of(fetches, self.graph)
        except (TypeError, ValueError):
            n = 1
        for _ in range(n - 1):
            original(self, fetches, feed_dict, options, run_metadata)
        return original(self, fetches, feed_dict, options, run_metadata)

    session_lib.BaseSession.run = run
    _patched.append((session_lib.BaseSession, original))


def uninstall_run_hook():
    while _patched:
        cls, original = _patched.pop()
        cls.run = original


__all__ = [
    "mark_loop", "iterations_of", "install_run_hook", "uninstall_run_hook",
]
