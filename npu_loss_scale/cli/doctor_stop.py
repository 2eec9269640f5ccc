"""How one run of ``npu-loss-scale doctor`` ends when it is asked to (SIGTERM from the doctor's
``--timeout`` or its Ctrl-C; SIGINT from a terminal's Ctrl-C), wherever the script is.

Python runs a signal handler in the main thread only, between two bytecodes: a run busy in
TensorFlow's C code (a ``Session.run`` of the replay that decides the sites' verdicts, a long
step) would not see SIGTERM until that call returns, and the doctor kills it 30 s later with no
result written. So, besides the handler that raises :class:`Stopped` (SIGTERM) as Python's own
raises ``KeyboardInterrupt`` (SIGINT):

* the signal's number reaches a watchdog thread at once, through ``signal.set_wakeup_fd``; it
  marks the run as stopping (``Recorder.stop_requested``: no further replay starts, the sites
  not yet judged are marked so) and, if the main thread has not ended the run within
  :data:`GRACE` seconds, writes the result itself (outcome ``stopped``, the steps and verdicts
  so far) and ends the process.
"""
import os
import signal
import threading
import time

from npu_loss_scale.cli.doctor_record import Stopped

__all__ = ["install", "GRACE"]

GRACE = 5.0   # seconds the main thread has to end the run itself (the doctor waits 30)
_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}


def _on_sigterm(rec):
    def handler(signum, frame):  # pylint: disable=unused-argument
        rec.stop_requested = rec.stop_requested or "SIGTERM"
        raise Stopped()
    return handler


def _watch(rec, read_fd, grace):
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        names = [_NAMES[n] for n in data if n in _NAMES]
        if names:
            break
    rec.stop_requested = rec.stop_requested or names[0]
    time.sleep(grace)
    with rec.lock:
        if rec.finished:
            return
        rec.outcome = "stopped"
        if rec.in_replay:
            rec.mark_not_judged()
        rec.detail = ("stopped by %s after %d steps; the script was inside TensorFlow "
                      "(%s) and did not return within %g s, so the run ended there"
                      % (rec.stop_requested, len(rec.steps),
                         "the replay of the sites' verdicts" if rec.in_replay else
                         "a step or its own work", grace))
        rec.write()
    os._exit(0)  # pylint: disable=protected-access


def install(rec, grace=GRACE):
    """SIGTERM's handler and the watchdog for ``rec`` (call from the main thread)."""
    signal.signal(signal.SIGTERM, _on_sigterm(rec))
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, TypeError):  # not the main thread: the handler alone
        os.close(read_fd)
        os.close(write_fd)
        return
    threading.Thread(target=_watch, args=(rec, read_fd, grace), name="doctor-stop",
                     daemon=True).start()
