"""The watchdog that bounds a Horovod status all-reduce which waits too long.

One :class:`_Watchdog` serves the process (:data:`horovod_watchdog`): agreement ``horovod`` arms
and disarms it around each all-reduce, and :func:`npu_loss_scale.agreement.explain_failure`
reads whether it fired.
"""
import itertools
import sys
import threading
import time

from npu_loss_scale._internal import messages as _messages


class _Watchdog:
    """Shuts Horovod down when a status all-reduce of this process waits longer than its timeout.

    Horovod has no timeout of its own for a rank that is alive but stops submitting the
    all-reduce (0.28.1 with Gloo neither warns nor shuts down on its stall settings, measured).
    The all-reduce is bracketed by two ``py_func`` ops: the first arms a deadline, the second
    disarms it. A thread checks the deadlines; when one passes it records the fact and calls
    ``hvd.shutdown()``, which fails the pending all-reduce on every rank ("Horovod has been shut
    down"), so ``session.run`` returns an error instead of waiting forever.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._pending = {}        # token -> (deadline, timeout, start)
        self._by_key = {}         # key of an all-reduce -> its latest token
        self._tokens = itertools.count(1)
        self._thread = None
        self.fired = None         # (timeout, seconds waited) once it shut Horovod down

    def arm(self, timeout, key=None):
        """Starts a deadline; returns its token. Arming ``key`` again drops the deadline it
        armed before (a run of that all-reduce that failed elsewhere never disarmed it)."""
        now = time.monotonic()
        with self._lock:
            token = next(self._tokens)
            if key is not None:
                stale = self._by_key.pop(key, None)
                if stale is not None:
                    self._pending.pop(stale, None)
                self._by_key[key] = token
            self._pending[token] = (now + timeout, timeout, now)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="nls-agreement-watchdog",
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
                _, timeout, start = late[0]
                self.fired = (timeout, now - start)
                self._pending.clear()
                self._by_key.clear()
                self._thread = None
            _messages.logger.error(
                "agreement 'horovod': the overflow-status all-reduce waited %.1f s, more than "
                "the timeout of %g s (a rank died, stalls, or never joined); shutting Horovod "
                "down so that every rank fails instead of waiting.", now - start, timeout)
            hvd = sys.modules.get("horovod.tensorflow")
            if hvd is not None:
                try:
                    hvd.shutdown()
                except Exception:  # pylint: disable=broad-except
                    pass
            return


horovod_watchdog = _Watchdog()

__all__ = ["horovod_watchdog"]
