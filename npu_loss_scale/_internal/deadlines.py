"""Deadlines on ops that TensorFlow cannot bound itself: a watchdog thread and the graph bracket.

An op that may wait forever (an all-reduce whose peer died) is bracketed by two ``py_func`` ops
(:func:`bracket`): the first arms a deadline of ``timeout`` seconds on a :class:`Watchdog`, the
second disarms it. When a deadline passes, the watchdog calls its
``on_late(timeout, waited, label)`` once, from its own thread, while the op still waits.

Two actions exist: agreement ``horovod`` shuts Horovod down, which fails the pending all-reduce
on every rank; :func:`exit_process` ends the process with status :data:`EXIT_STATUS`, for
TensorFlow 1.15's collective ops, which take no timeout and do not stop when their step is
cancelled (measured: ``operation_timeout_in_ms`` leaves them waiting), so nothing else returns.

Pseudocode of one bracketed run::

    token = watchdog.arm(timeout)      # py_func before the op
    out = op(x)                        # may wait
    watchdog.disarm(token)             # py_func after it
    # a thread: if now > deadline of a token still armed: on_late(timeout, waited, label)
"""
import itertools
import logging
import os
import sys
import threading
import time

from npu_loss_scale._internal import messages as _messages

EXIT_STATUS = 124   # what the ``timeout`` command returns for a command that ran too long


class Watchdog:
    """Deadlines armed and disarmed around waiting ops; ``on_late(timeout, waited, label)`` runs
    once when one passes (every other deadline is dropped then), and :attr:`fired` says so."""

    def __init__(self, on_late):
        self._on_late = on_late
        self._lock = threading.Lock()
        self._pending = {}        # token -> (deadline, timeout, start, label)
        self._by_key = {}         # key of a bracketed op -> its latest token
        self._tokens = itertools.count(1)
        self._keys = itertools.count(1)
        self._thread = None
        self.fired = None         # (timeout, seconds waited) once it fired

    def new_key(self):
        """A key for one bracketed op (:meth:`arm` with it drops the op's previous deadline)."""
        return next(self._keys)

    def arm(self, timeout, key=None, label=None):
        """Starts a deadline; returns its token. Arming ``key`` again drops the deadline it
        armed before (a run of that op that failed elsewhere never disarmed it); ``label``
        names the op to ``on_late``."""
        now = time.monotonic()
        with self._lock:
            token = next(self._tokens)
            if key is not None:
                stale = self._by_key.pop(key, None)
                if stale is not None:
                    self._pending.pop(stale, None)
                self._by_key[key] = token
            self._pending[token] = (now + timeout, timeout, now, label)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="nls-deadline-watchdog",
                                                daemon=True)
                self._thread.start()
        return token

    def disarm(self, token):
        with self._lock:
            self._pending.pop(int(token), None)
            for key, value in list(self._by_key.items()):
                if value == int(token):
                    del self._by_key[key]

    def _run(self):
        while True:
            time.sleep(0.2)
            now = time.monotonic()
            with self._lock:
                late = [entry for entry in self._pending.values() if entry[0] <= now]
                if not self._pending:
                    self._thread = None
                    return
                if not late:
                    continue
                _, timeout, start, label = late[0]
                self.fired = (timeout, now - start)
                self._pending.clear()
                self._by_key.clear()
                self._thread = None
            self._on_late(timeout, now - start, label)
            return


def bracket(watchdog, tensor, timeout, op, name, label=None):
    """``op(tensor)`` between a ``py_func`` that arms ``watchdog`` for ``timeout`` seconds and
    one that disarms it; returns (the op's output, the same value after the disarm). The two
    ``py_func`` ops are named ``<name>_arm`` and ``<name>_disarm``; ``label`` (default the op's
    name) names the op to the watchdog's ``on_late``."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    key = watchdog.new_key()
    label = name if label is None else label

    def arm(value):
        return value, np.int64(watchdog.arm(timeout, key, label))

    def disarm(value, token):
        watchdog.disarm(token)
        return value

    armed, token = tf.compat.v1.py_func(arm, [tensor], [tensor.dtype, tf.int64], stateful=True,
                                         name=name + "_arm")
    armed.set_shape(tensor.shape)
    out = op(armed)
    done = tf.compat.v1.py_func(disarm, [out, token], out.dtype, stateful=True,
                                name=name + "_disarm")
    done.set_shape(out.shape)
    return out, done


# Where a thread waits while TensorFlow runs a graph (a Session's run or callable) or an op
# eagerly: a bracketed op can only be waiting while some thread is inside one of these files.
_RUNNING_FILES = (os.path.join("client", "session.py"), os.path.join("eager", "execute.py"))


def _tensorflow_running():
    """Whether a thread of this process is inside TensorFlow running a graph or an op.

    Sees a Session's run (every TF version) and a ``tf.function``'s call (TF 2.6.5, 2.15, 2.21),
    but not an op run eagerly on TF 2, which goes through its generated wrapper's fast path
    (measured: a ``numpy_function`` called eagerly finds no such frame). Hence only
    :func:`exit_process`, for TF 1.15's graphs, consults it; Horovod's watchdog, whose
    all-reduce may run eagerly, does not."""
    for frame in sys._current_frames().values():  # pylint: disable=protected-access
        while frame is not None:
            if frame.f_code.co_filename.endswith(_RUNNING_FILES):
                return True
            frame = frame.f_back
    return False


def exit_process(timeout, waited, label):
    """An ``on_late`` that logs an ERROR saying the op ``label`` waited too long, then ends the
    process with :data:`EXIT_STATUS` (flushing the logger, ``sys.stdout`` and ``sys.stderr``
    first).

    Unless no thread is running TensorFlow: then the op is not waiting, and its deadline is one
    a failed step left armed (another op failed after the all-reduce finished, so the disarm
    never ran); it is dropped, at INFO, and the process goes on."""
    if not _tensorflow_running():
        _messages.logger.info(
            "the deadline of %s passed while no TensorFlow run was in progress (its step "
            "failed elsewhere after it finished); dropped.", label)
        return
    _messages.logger.error(
        "%s waited %.1f s, more than its timeout of %g s (a rank died, stalls, or never "
        "joined), and cannot be stopped while it waits: this process exits with status %d "
        "instead of waiting forever.", label, waited, timeout, EXIT_STATUS)
    handlers = _messages.logger.handlers + logging.getLogger().handlers
    for handler in handlers + [sys.stdout, sys.stderr]:
        try:
            handler.flush()
        except Exception:  # pylint: disable=broad-except
            pass
    os._exit(EXIT_STATUS)  # pylint: disable=protected-access


__all__ = ["EXIT_STATUS", "Watchdog", "bracket", "exit_process"]
