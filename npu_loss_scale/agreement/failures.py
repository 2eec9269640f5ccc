"""What went wrong when the ranks could not agree: :class:`AgreementError` and its diagnosis.

Every status all-reduce is recorded when it is built (:func:`record_reduce`: its op name, the
agreement, the timeout in force); :func:`explain_failure` matches a TensorFlow or Horovod error
against that record and :func:`failure_messages` re-raises it as an :class:`AgreementError` whose
message names the backend and its timeout.
"""
import contextlib
import os
import threading

import tensorflow as tf

from npu_loss_scale.agreement.cluster import TIMEOUT_ENV_VAR
from npu_loss_scale.agreement.watchdog import horovod_watchdog


class AgreementError(RuntimeError):
    """The ranks could not agree on the overflow status: a rank died, stalls, or never joined.

    Raised by :func:`failure_messages` (from the TensorFlow or Horovod error, kept as
    ``__cause__``). Attributes: ``backend`` (an :data:`AGREEMENT_NAMES` entry), ``timeout``
    (seconds, or None when unknown), ``op_name`` (the status all-reduce) and ``cause``.
    """

    def __init__(self, message, backend, timeout, op_name, cause):
        super().__init__(message)
        self.backend = backend
        self.timeout = timeout
        self.op_name = op_name
        self.cause = cause


# name of every status all-reduce built in this process -> (backend, timeout seconds, details)
_built_reduces = {}
_built_lock = threading.Lock()


def record_reduce(tensor, backend, timeout, details):
    """Records the status all-reduce ``tensor`` (built by agreement ``backend`` with ``timeout``
    seconds, or None when unknown; ``details`` says how it reduces) for :func:`explain_failure`.
    Agreements outside this package (the ``npu_device`` shim's) record theirs here too."""
    name = getattr(getattr(tensor, "op", None), "name", None)
    if name is None:
        return
    with _built_lock:
        if len(_built_reduces) > 1000:
            _built_reduces.clear()
        _built_reduces[name] = (backend, timeout, details)


def _horovod_timeout_settings():
    keys = ("HOROVOD_GLOO_TIMEOUT_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS",
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")
    return {key: os.environ[key] for key in keys if os.environ.get(key)}


def _failed_reduce(err):
    """(op name, (backend, timeout, details)) of the status all-reduce ``err`` comes from."""
    op = getattr(err, "op", None)
    message = str(getattr(err, "message", None) or err)
    with _built_lock:
        built = dict(_built_reduces)
    name = getattr(op, "name", None)
    if name in built:
        return name, built[name]
    for name, entry in sorted(built.items(), key=lambda item: -len(item[0])):
        if "'%s'" % name in message or "node %s" % name in message \
                or '"%s"' % name in message or name + ":" in message:
            return name, entry
    if "Horovod has been shut down" in message:
        horovod = [(n, e) for n, e in built.items() if e[0] == "horovod"]
        if horovod:
            return horovod[-1]
    return None


def _cause_line(err):
    """The line of a TensorFlow error that says what happened (not "Graph execution error:" nor
    the stack trace of the op)."""
    lines = [line.strip() for line in str(getattr(err, "message", None) or err).splitlines()
             if line.strip()]
    skip = ("Graph execution error", "Detected at node", "File \"", "Original stack trace",
            "[[", "Node:", "Op:")
    body = [line for line in lines if not line.startswith(skip)] or lines or [""]
    for word in ("timed out", "shut down", "Connection", "abort", "Abort"):
        for line in body:
            if word in line:
                return line[:400]
    return body[0][:400]


def explain_failure(err):
    """An :class:`AgreementError` for ``err`` if it comes from the overflow-status agreement
    (a collective that timed out or was aborted, Horovod shut down), else None.

    Its message names the backend, the status all-reduce and the timeout in force. Example::

        try:
            sess.run(train_op)
        except tf.errors.OpError as err:
            clear = agreement.explain_failure(err)
            raise clear or err
    """
    found = _failed_reduce(err)
    if found is None:
        return None
    op_name, (backend, timeout, details) = found
    cause = "%s: %s" % (type(err).__name__, _cause_line(err))
    if backend == "horovod":
        settings = _horovod_timeout_settings()
        gloo = settings.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "Horovod's default")
        fired = horovod_watchdog.fired
        what = ("this rank's all-reduce waited %.1f s, past the timeout, and was stopped"
                % fired[1]) if fired else "a rank died, stalled or never joined"
        message = ("npu_loss_scale agreement 'horovod' (%s) failed at the overflow-status "
                   "all-reduce %r: %s, so no rank applies this step. Timeout: %g s for a "
                   "pending all-reduce, HOROVOD_GLOO_TIMEOUT_SECONDS=%s for joining (set both "
                   "with npu_loss_scale.agreement.configure_horovod_timeouts(seconds) before "
                   "hvd.init(), or $%s). Cause: %s"
                   % (details, op_name, what, timeout, gloo, TIMEOUT_ENV_VAR, cause))
    else:
        message = ("npu_loss_scale agreement %r (%s) failed at the overflow-status all-reduce "
                   "%r: not every rank took part within the timeout of %g s (a rank died, "
                   "stalled, or never joined), so no rank applies this step. Set the timeout "
                   "with timeout= (configure_collective / CollectiveCluster) or $%s. Cause: %s"
                   % (backend, details, op_name, timeout, TIMEOUT_ENV_VAR, cause))
    return AgreementError(message, backend, timeout, op_name, err)


@contextlib.contextmanager
def failure_messages():
    """Re-raises a failure of the overflow-status agreement inside the block as an
    :class:`AgreementError` naming the backend and the timeout (other errors pass unchanged).

    Example::

        with agreement.failure_messages():
            for step in range(steps):
                sess.run(train_op)
    """
    try:
        yield
    except tf.errors.OpError as err:
        clear = explain_failure(err)
        if clear is None:
            raise
        raise clear from err


__all__ = ["AgreementError", "explain_failure", "failure_messages", "record_reduce"]
