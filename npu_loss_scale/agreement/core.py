"""Agreement across ranks on the overflow status: every rank applies or skips the same steps.

With ``is_distributed=True`` the overflow status of each rank is summed over all ranks with *one*
collective per step (whatever the number of gradients), so a rank that overflowed makes every
rank skip, and loss scales, counters and ``global_step`` never diverge. In saturation mode this
is the only way a rank learns of another rank's overflow: the device register is per device and
the saturated gradients look finite.

The ways to agree (``AGREEMENT_NAMES``):

``strategy``
    Inside a ``tf.distribute`` strategy the optimizer sums the per-replica statuses with the
    strategy's own ``reduce`` (one all-reduce, inside TensorFlow's ``merge_call`` structure),
    over every replica and worker of the strategy. Nothing more is needed.
``hccl``
    ``npu_bridge.hccl.hccl_ops.allreduce(status, "sum")`` on Ascend devices (``npu`` backend).
``horovod``
    ``horovod.tensorflow.allreduce(status, op=Sum)``, after ``hvd.init()``.
``collective``
    TensorFlow's own collective ops (``CollectiveReduceV2``) in graph mode, across processes that
    each run a ``tf.distribute.Server``. The group comes from :func:`configure_collective` or
    from ``TF_CONFIG``; see :class:`CollectiveCluster`.

The choice is the optimizer's ``agreement=`` argument, else discovered in this order:

1. a ``tf.distribute`` strategy in scope that spans processes -> ``strategy``;
2. ``npu_bridge`` HCCL importable with the ``npu`` detection backend -> ``hccl``;
3. Horovod imported and initialised -> ``horovod``;
4. a collective group configured with :func:`configure_collective`, or a ``TF_CONFIG`` naming
   more than one chief/worker task -> ``collective``;
5. a single-process strategy (e.g. ``MirroredStrategy``) in scope -> ``strategy``.

(A single-process strategy inside a multi-process job - say ``MirroredStrategy`` on each Horovod
rank - sums over its local replicas first; the process-level backend then sums over processes.)
When ``is_distributed=True`` and nothing is found, building the train op raises an error
instead of letting ranks silently diverge; :func:`agreement_name` tells what would be used.

No hangs: a rank that dies or never joins makes the others fail within a bounded time.
``collective`` passes a timeout to every collective (``timeout=`` / :func:`configure_collective`,
else ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT`` seconds, else 300 s) and raises
``DeadlineExceededError: Collective has timed out ...`` on the surviving ranks. ``horovod``
relies on Horovod's own timeouts, which :func:`configure_horovod_timeouts` sets before
``hvd.init()``. Wrap the training loop's ``session.run`` calls in :func:`failure_messages` (or
pass an error to :func:`explain_failure`) to turn such a failure into an
:class:`AgreementError` whose message names the backend and its timeout.

Example (Horovod)::

    import horovod.tensorflow as hvd
    import npu_loss_scale as nls
    from npu_loss_scale import agreement

    agreement.configure_horovod_timeouts(60)      # before hvd.init()
    hvd.init()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    opt = nls.NPULossScaleOptimizer(opt, nls.FixedLossScaleManager(1024), is_distributed=True)
    assert agreement.agreement_name() == "horovod"
"""
import contextlib
import importlib
import itertools
import json
import os
import sys
import threading
import time
import warnings

import numpy as np
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import probe
from npu_loss_scale._internal import messages as _messages
from npu_loss_scale._internal.compat import collectives

AGREEMENT_NAMES = ("strategy", "hccl", "horovod", "collective")

TIMEOUT_ENV_VAR = "NPU_LOSS_SCALE_AGREEMENT_TIMEOUT"
DEFAULT_TIMEOUT_SECONDS = 300.0

# A group key unlikely to collide with the keys tf.distribute allocates (it counts up from 1).
DEFAULT_GROUP_KEY = 0x4E4C53
# Instance keys of the status all-reduces count up from here, one per train op built.
DEFAULT_INSTANCE_KEY_BASE = 0x4E4C5300

STATUS_ALLREDUCE_NAME = "overflow_status_allreduce"

# Op types that carry data between ranks; used to count collectives per step.
COLLECTIVE_OP_TYPES = frozenset([
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather",
    "CollectiveGatherV2", "CollectiveBcastSend", "CollectiveBcastRecv", "CollectiveBcastSendV2",
    "CollectiveBcastRecvV2", "CollectiveAllToAllV2", "CollectiveAllToAllV3",
    "NcclAllReduce", "HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather",
    "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter", "HcomAllReduce",
])


def _timeout_from_env():
    raw = os.environ.get(TIMEOUT_ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError("environment variable %s must be a number of seconds > 0; got %r"
                         % (TIMEOUT_ENV_VAR, raw))
    return value


def _timeout(value):
    if value is None:
        return _timeout_from_env()
    return _checks.real_number("timeout", value, minimum=0.0, min_inclusive=False,
                               accepted="> 0 (seconds)")


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


def _record_reduce(tensor, backend, timeout, details):
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
        fired = _horovod_watchdog.fired
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


class Agreement:
    """One way for ranks to agree on the overflow status.

    ``reduce(status)`` takes this rank's float32 status vector (all zeros = no overflow) and
    returns the element-wise sum over all ranks, so that every rank computes the same
    ``finite = reduce_all(status == 0)``. It adds :attr:`collectives_per_step` collectives to the
    graph, whatever the number of gradients.
    """

    name = None
    collectives_per_step = 1

    def reduce(self, status):
        raise NotImplementedError

    def __repr__(self):
        return "<%s agreement>" % self.name


class StrategyAgreement(Agreement):
    """Inside a ``tf.distribute`` strategy: the optimizer's ``distribution.reduce(SUM, ...)`` of
    the per-replica statuses already spans every replica and worker of the strategy, so the
    status arrives here agreed upon and passes through unchanged."""

    name = "strategy"

    def reduce(self, status):
        if not tf.distribute.has_strategy():
            raise RuntimeError(
                "agreement='strategy' needs a tf.distribute strategy in scope when the train op "
                "is built (build it inside strategy.scope() / strategy.run); none is, so ranks "
                "would not agree. Pass agreement='horovod', 'hccl' or 'collective' instead, or "
                "leave agreement=None to discover one.")
        return status


class HcclAgreement(Agreement):
    """Sums the status over the HCCL world with ``npu_bridge``'s all-reduce (Ascend devices)."""

    name = "hccl"

    def __init__(self):
        try:
            self._ops = importlib.import_module("npu_bridge.hccl.hccl_ops")
        except ImportError as err:
            raise ImportError("agreement 'hccl' needs npu_bridge.hccl.hccl_ops (from Huawei's "
                              "CANN toolkit), which did not import: %s. Off the device use "
                              "agreement='horovod' or 'collective'." % err) from err

    def reduce(self, status):
        return self._ops.allreduce(status, "sum", fusion=0)


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


_horovod_watchdog = _Watchdog()
_watchdog_keys = itertools.count(1)
_horovod_configured_timeout = None


def _horovod_timeout(timeout):
    if timeout is not None:
        return _timeout(timeout)
    if _horovod_configured_timeout is not None:
        return _horovod_configured_timeout
    return _timeout_from_env()


class HorovodAgreement(Agreement):
    """Sums the status over all Horovod ranks: ``hvd.allreduce(status, op=hvd.Sum)``.

    ``hvd.init()`` must have run. A rank that dies makes Horovod shut down on the others
    ("Horovod has been shut down ..."); a rank that never joins is bounded by
    ``HOROVOD_GLOO_TIMEOUT_SECONDS`` (set by :func:`configure_horovod_timeouts`); a rank that
    stops calling the all-reduce by a watchdog: when this process's all-reduce has waited
    ``timeout`` seconds, Horovod is shut down, which fails the step on every rank.

    Args:
      timeout: seconds; default the one given to :func:`configure_horovod_timeouts`, else
        ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT``, else 300.
    """

    name = "horovod"

    def __init__(self, timeout=None):
        self.timeout = _horovod_timeout(timeout)
        try:
            self._hvd = importlib.import_module("horovod.tensorflow")
        except ImportError as err:
            raise ImportError("agreement 'horovod' needs horovod.tensorflow, which did not "
                              "import: %s. Build it with scripts/build_horovod.sh." % err) from err
        if not _horovod_initialized(self._hvd):
            raise RuntimeError("agreement 'horovod': Horovod is not initialised. Call "
                               "horovod.tensorflow.init() before building the train op.")

    def reduce(self, status):
        timeout = self.timeout
        key = next(_watchdog_keys)

        def arm(value):
            return value, np.int64(_horovod_watchdog.arm(timeout, key))

        def disarm(value, token):
            _horovod_watchdog.disarm(token)
            return value

        armed, token = tf.compat.v1.py_func(arm, [status], [status.dtype, tf.int64],
                                             stateful=True, name="agreement_watchdog_arm")
        armed.set_shape(status.shape)
        out = self._hvd.allreduce(armed, op=self._hvd.Sum, name=STATUS_ALLREDUCE_NAME)
        _record_reduce(out, self.name, timeout, "hvd.allreduce over %d ranks" % self._hvd.size())
        done = tf.compat.v1.py_func(disarm, [out, token], status.dtype, stateful=True,
                                    name="agreement_watchdog_disarm")
        done.set_shape(status.shape)
        return done


def configure_horovod_timeouts(seconds=None):
    """Bounds how long Horovod ranks wait for a rank that died, never joined, or stalls.

    Sets, unless already set, the environment variables Horovod reads in ``hvd.init()``:
    ``HOROVOD_GLOO_TIMEOUT_SECONDS`` (rendezvous and Gloo transfers),
    ``HOROVOD_STALL_CHECK_TIME_SECONDS`` and ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`` (a live rank
    that stops submitting the all-reduce). Call it *before* ``hvd.init()``. ``seconds`` defaults
    to ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT``, else 300. Returns the variables it applies.

    Example::

        configure_horovod_timeouts(60)
        hvd.init()
    """
    global _horovod_configured_timeout
    seconds = _timeout(seconds)
    _horovod_configured_timeout = seconds      # the watchdog of HorovodAgreement
    whole = str(max(1, int(round(seconds))))
    wanted = {
        "HOROVOD_GLOO_TIMEOUT_SECONDS": whole,
        "HOROVOD_STALL_CHECK_TIME_SECONDS": str(max(1, int(round(seconds)) // 2)),
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": whole,
    }
    applied = {}
    for key, value in wanted.items():
        applied[key] = os.environ.setdefault(key, value)
    return applied


# -- TensorFlow collectives ----------------------------------------------------------------------
_COLLECTIVE_JOBS = ("chief", "worker")


class CollectiveCluster:
    """This process's place in a group of processes that all-reduce with TF collective ops.

    The group is every ``chief`` and ``worker`` task of the cluster (in that order; ``ps`` and
    ``evaluator`` tasks are not members). Task 0 of the first job is the group leader.

    Each process must run a ``tf.distribute.Server`` for its task and build its ``Session`` on
    ``server.target`` with :meth:`session_config` - it sets
    ``experimental.collective_group_leader`` (without it collectives hang) and a device filter
    (so that creating the session does not wait for the other tasks).

    Args:
      cluster_spec: a ``tf.train.ClusterSpec`` or a dict ``{"worker": ["host:port", ...]}``.
      task_type: this process's job, ``"chief"`` or ``"worker"``.
      task_id: this process's index in that job.
      group_key: the collective group key (default :data:`DEFAULT_GROUP_KEY`).
      timeout: seconds a collective waits for the other members before failing with
        ``DeadlineExceededError`` (default ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT``, else 300).
      instance_key_base: first instance key of the status all-reduces (one per train op built,
        counted up in the same order on every rank).

    Example::

        cluster = CollectiveCluster({"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},
                                    "worker", 0, timeout=60)
        configure_collective(cluster)
        server = cluster.start_server()
        sess = tf.compat.v1.Session(server.target, config=cluster.session_config())
    """

    def __init__(self, cluster_spec, task_type, task_id, *, group_key=DEFAULT_GROUP_KEY,
                 timeout=None, instance_key_base=DEFAULT_INSTANCE_KEY_BASE):
        if isinstance(cluster_spec, dict):
            cluster_spec = tf.train.ClusterSpec(cluster_spec)
        if not isinstance(cluster_spec, tf.train.ClusterSpec):
            raise TypeError("cluster_spec must be a tf.train.ClusterSpec or a dict like "
                            "{'worker': ['host:port', ...]}; got %r (type %s)"
                            % (cluster_spec, type(cluster_spec).__name__))
        jobs = [job for job in _COLLECTIVE_JOBS if job in cluster_spec.jobs]
        if not jobs:
            raise ValueError("cluster_spec has no 'chief' or 'worker' job to form a collective "
                             "group; jobs found: %s" % sorted(cluster_spec.jobs))
        _checks.one_of("task_type", task_type, tuple(jobs))
        if isinstance(task_id, bool) or not isinstance(task_id, int):
            raise TypeError("task_id must be an int; got %r (type %s)"
                            % (task_id, type(task_id).__name__))
        members = [(job, index) for job in jobs for index in cluster_spec.task_indices(job)]
        if (task_type, task_id) not in members:
            raise ValueError("task_id must be one of %s for job %r; got %r" % (
                cluster_spec.task_indices(task_type), task_type, task_id))
        for name, value in (("group_key", group_key), ("instance_key_base", instance_key_base)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2 ** 31:
                raise ValueError("%s must be an int in [1, 2**31); got %r" % (name, value))
        self.cluster_spec = cluster_spec
        self.task_type = task_type
        self.task_id = task_id
        self.group_key = group_key
        self.timeout = _timeout(timeout)
        self.instance_key_base = instance_key_base
        self.members = tuple(members)
        self._instance_keys = itertools.count(instance_key_base)
        self._lock = threading.Lock()

    @classmethod
    def from_tf_config(cls, tf_config=None, **kwargs):
        """The cluster of ``TF_CONFIG`` (the environment variable, or a dict or JSON string).

        Returns None when there is no ``TF_CONFIG``, it names no cluster, or this task is not a
        chief/worker. Keyword arguments go to the constructor.
        """
        if tf_config is None:
            tf_config = os.environ.get("TF_CONFIG", "")
        if isinstance(tf_config, str):
            if not tf_config.strip():
                return None
            try:
                tf_config = json.loads(tf_config)
            except ValueError as err:
                raise ValueError("TF_CONFIG is not valid JSON: %s" % err) from err
        cluster = tf_config.get("cluster") or {}
        task = tf_config.get("task") or {}
        task_type, task_id = task.get("type"), task.get("index", 0)
        if not any(cluster.get(job) for job in _COLLECTIVE_JOBS):
            return None
        if task_type not in _COLLECTIVE_JOBS:
            return None
        return cls(tf.train.ClusterSpec(cluster), task_type, int(task_id), **kwargs)

    @property
    def group_size(self):
        """How many processes take part in each all-reduce."""
        return len(self.members)

    @property
    def rank(self):
        """This process's index in :attr:`members`."""
        return self.members.index((self.task_type, self.task_id))

    @property
    def leader(self):
        job, index = self.members[0]
        return "/job:%s/replica:0/task:%d" % (job, index)

    @property
    def device(self):
        """The device of this process that runs the all-reduce."""
        return "/job:%s/replica:0/task:%d/device:CPU:0" % (self.task_type, self.task_id)

    def session_config(self, config=None):
        """A copy of ``config`` (or a new ConfigProto) set up for collectives in this group."""
        out = tf.compat.v1.ConfigProto()
        if config is not None:
            out.CopyFrom(config)
        out.experimental.collective_group_leader = self.leader
        own = "/job:%s/task:%d" % (self.task_type, self.task_id)
        if own not in out.device_filters:
            out.device_filters.append(own)
        return out

    def start_server(self, config=None):
        """Starts this task's ``tf.distribute.Server`` (with :meth:`session_config`)."""
        return tf.distribute.Server(self.cluster_spec, job_name=self.task_type,
                                    task_index=self.task_id,
                                    config=self.session_config(config), start=True)

    def next_instance_key(self):
        with self._lock:
            return next(self._instance_keys)

    def __repr__(self):
        return ("CollectiveCluster(task=%s:%d, rank=%d, group_size=%d, group_key=%d, "
                "timeout=%gs)" % (self.task_type, self.task_id, self.rank, self.group_size,
                                  self.group_key, self.timeout))


_configured_cluster = None
_tf_config_cluster = {}  # TF_CONFIG text -> CollectiveCluster (keeps its instance-key counter)


def configure_collective(cluster_spec=None, task_type=None, task_id=None, **kwargs):
    """Sets the process-wide group that agreement ``collective`` all-reduces over; returns it.

    Pass a :class:`CollectiveCluster`, or the arguments of one, or nothing to read ``TF_CONFIG``.
    ``configure_collective(None)`` with no ``TF_CONFIG`` clears the setting.

    Example::

        cluster = configure_collective({"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},
                                       "worker", rank, timeout=60)
    """
    global _configured_cluster
    if isinstance(cluster_spec, CollectiveCluster):
        if task_type is not None or task_id is not None or kwargs:
            raise TypeError("configure_collective: pass either a CollectiveCluster or the "
                            "arguments of one, not both")
        cluster = cluster_spec
    elif cluster_spec is None:
        cluster = CollectiveCluster.from_tf_config(**kwargs)
    else:
        cluster = CollectiveCluster(cluster_spec, task_type, task_id, **kwargs)
    _configured_cluster = cluster
    return cluster


def get_collective_cluster():
    """The group of :func:`configure_collective`, else the one of ``TF_CONFIG``, else None."""
    if _configured_cluster is not None:
        return _configured_cluster
    text = os.environ.get("TF_CONFIG", "")
    if not text.strip():
        return None
    cluster = _tf_config_cluster.get(text)
    if cluster is None:
        cluster = CollectiveCluster.from_tf_config(text)
        _tf_config_cluster.clear()
        _tf_config_cluster[text] = cluster
    return cluster


class CollectiveAgreement(Agreement):
    """Sums the status with TF's ``CollectiveReduceV2`` over the processes of a
    :class:`CollectiveCluster` (graph mode; sessions on ``server.target``).

    Args:
      cluster: a :class:`CollectiveCluster`; default :func:`get_collective_cluster`.
      timeout: seconds before a missing rank makes the all-reduce fail; default the cluster's.
      instance_key: the all-reduce's instance key; default the cluster's next one (each train
        op needs its own, equal on every rank: build train ops in the same order on all ranks).
      communication_hint: ``"auto"``, ``"ring"`` or ``"nccl"``.
    """

    name = "collective"

    def __init__(self, cluster=None, *, timeout=None, instance_key=None,
                 communication_hint="auto"):
        cluster = cluster if cluster is not None else get_collective_cluster()
        if cluster is None:
            raise RuntimeError(
                "agreement 'collective' needs a group of processes: call "
                "npu_loss_scale.agreement.configure_collective(cluster_spec, task_type, task_id) "
                "or set TF_CONFIG, and run the session on that task's tf.distribute.Server.")
        if not isinstance(cluster, CollectiveCluster):
            raise TypeError("cluster must be a CollectiveCluster; got %r" % (cluster,))
        self.cluster = cluster
        self.timeout = cluster.timeout if timeout is None else _timeout(timeout)
        self._instance_key = instance_key
        self.communication_hint = _checks.one_of("communication_hint", communication_hint,
                                                 ("auto", "ring", "nccl"))

    def reduce(self, status):
        if tf.executing_eagerly():
            raise RuntimeError("agreement 'collective' works in graph mode (a tf.Graph run by "
                               "a Session on the task's server); in eager mode use a "
                               "tf.distribute strategy (agreement 'strategy').")
        key = self._instance_key
        if key is None:
            key = self.cluster.next_instance_key()
        with tf.device(self.cluster.device):
            out = collectives.all_reduce_sum(
                status, group_size=self.cluster.group_size, group_key=self.cluster.group_key,
                instance_key=key, communication_hint=self.communication_hint,
                timeout=self.timeout, name=STATUS_ALLREDUCE_NAME)
        _record_reduce(out, self.name, self.timeout if collectives.HAS_TIMEOUT else None,
                       "TF CollectiveReduce%s over %d processes"
                       % ("V2" if collectives.HAS_TIMEOUT else "", self.cluster.group_size))
        return out


# -- discovery -----------------------------------------------------------------------------------
def _horovod_initialized(hvd):
    try:
        return bool(hvd.is_initialized())
    except Exception:  # pylint: disable=broad-except
        return False


def _horovod_ready():
    hvd = sys.modules.get("horovod.tensorflow")
    return hvd is not None and _horovod_initialized(hvd)


def _horovod_size():
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is None or not _horovod_initialized(hvd):
        return None
    try:
        return int(hvd.size())
    except Exception:  # pylint: disable=broad-except
        return None


def _hccl_ready(backend_name):
    if backend_name != "npu":
        return False
    try:
        importlib.import_module("npu_bridge.hccl.hccl_ops")
    except ImportError:
        return False
    return True


def _collective_ready():
    try:
        cluster = get_collective_cluster()
    except ValueError:
        return False
    return cluster is not None and cluster.group_size > 1


def _strategy_spans_processes(strategy):
    extended = strategy.extended
    probe = getattr(extended, "_in_multi_worker_mode", None)
    if callable(probe):
        try:
            return bool(probe())
        except Exception:  # pylint: disable=broad-except
            return False
    # TF 1.15's multi-worker strategy has no such probe; it keeps its worker count.
    workers = getattr(extended, "_num_workers", None)
    return isinstance(workers, int) and workers > 1


def _discover(backend_name):
    """The name of the agreement discovery picks, or None (see the module docstring)."""
    strategy = tf.distribute.get_strategy() if tf.distribute.has_strategy() else None
    if strategy is not None and _strategy_spans_processes(strategy):
        return "strategy"
    if _hccl_ready(backend_name):
        return "hccl"
    if _horovod_ready():
        return "horovod"
    if _collective_ready():
        return "collective"
    if strategy is not None:
        return "strategy"
    return None


_FACTORIES = {"strategy": StrategyAgreement, "hccl": HcclAgreement,
              "horovod": HorovodAgreement, "collective": CollectiveAgreement}


def agreement_name(choice=None, backend_name=None):
    """Which agreement ``make_agreement(choice, backend_name)`` would use now, or None.

    ``backend_name`` defaults to the detection backend in force (see
    :func:`npu_loss_scale.get_backend_name`).

    Example::

        hvd.init()
        assert agreement_name() == "horovod"
    """
    if isinstance(choice, Agreement):
        return choice.name
    if choice is not None:
        return _checks.one_of("agreement", choice, AGREEMENT_NAMES)
    if backend_name is None:
        backend_name = probe.get_backend_name()
    return _discover(backend_name)


def make_agreement(choice, backend_name):
    """Returns the :class:`Agreement` to use with ``is_distributed=True``; raises if there is none.

    ``choice``: an :class:`Agreement`, one of :data:`AGREEMENT_NAMES`, or None to discover.
    """
    if isinstance(choice, Agreement):
        return choice
    if choice is not None:
        return _FACTORIES[_checks.one_of("agreement", choice, AGREEMENT_NAMES)]()
    name = _discover(backend_name)
    if name is None:
        raise RuntimeError(
            "is_distributed=True, but there is nothing to agree on the overflow status through: "
            "no tf.distribute strategy is in scope, npu_bridge HCCL is not available (it needs "
            "the 'npu' backend; this one is %r), Horovod is not initialised (call hvd.init() "
            "first), and no TF collective group is configured (call "
            "npu_loss_scale.agreement.configure_collective(...) or set TF_CONFIG). Pass "
            "agreement= one of %s, or is_distributed=False for a single process."
            % (backend_name, ", ".join(AGREEMENT_NAMES)))
    return _FACTORIES[name]()


# -- is_distributed=False in a multi-worker run -----------------------------------------------------
RanksMayDivergeWarning = _messages.RanksMayDivergeWarning


_ENV_WORLD_SIZES = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "RANK_SIZE", "WORLD_SIZE")
_warned = False
_warn_lock = threading.Lock()


def multi_worker_reason():
    """Why this process looks like one rank of several, or None in a single-process run.

    Looks at an initialised Horovod, the launcher environment variables (``HOROVOD_SIZE``,
    ``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``, Ascend's ``RANK_SIZE``, ``WORLD_SIZE``), a
    :func:`configure_collective` group and ``TF_CONFIG``.
    """
    size = _horovod_size()
    if size is not None and size > 1:
        return "Horovod is initialised with %d ranks" % size
    for var in _ENV_WORLD_SIZES:
        raw = os.environ.get(var, "").strip()
        if raw.isdigit() and int(raw) > 1:
            return "%s=%s" % (var, raw)
    try:
        cluster = get_collective_cluster()
    except ValueError:
        cluster = None
    if cluster is not None and cluster.group_size > 1:
        return "a TF cluster of %d chief/worker tasks is configured" % cluster.group_size
    return None


def warn_if_ranks_may_diverge():
    """Warns once per process when ``is_distributed=False`` in what looks like a multi-rank run.

    The optimizer calls it when it builds a train op with ``is_distributed=False``. Inside a
    ``tf.distribute`` strategy it stays silent: the optimizer sums the status over the
    strategy's replicas anyway. Returns True when it warned (this call), else False.
    """
    global _warned
    if _warned or tf.distribute.has_strategy():
        return False
    reason = multi_worker_reason()
    if reason is None:
        return False
    with _warn_lock:
        if _warned:
            return False
        _warned = True
    warnings.warn(
        "npu_loss_scale: NPULossScaleOptimizer was built with is_distributed=False, but this "
        "process looks like one rank of several (%s). Each rank will decide alone whether to "
        "skip a step, so after an overflow on one rank the ranks' loss scales, global_step and "
        "variables may diverge. Pass is_distributed=True (see docs/distributed.md)." % reason,
        RanksMayDivergeWarning, stacklevel=_caller_stacklevel())
    return True


def _caller_stacklevel():
    """The warnings stacklevel of the first frame outside this package and TensorFlow, so the
    warning points at the user's minimize()/apply_gradients() call."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    internal = (package, os.path.dirname(os.path.abspath(tf.__file__)))
    frame = sys._getframe(2)  # pylint: disable=protected-access  # warn_if_ranks_may_diverge's caller
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(internal):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 2


def _reset_divergence_warning():
    """Lets :func:`warn_if_ranks_may_diverge` warn again (for tests)."""
    global _warned
    with _warn_lock:
        _warned = False


def count_collectives(fetches):
    """How many collective ops (TF collectives, NCCL, Horovod, HCCL) one run of ``fetches``
    executes at most: the collectives among their ancestors in the graph, including those inside
    functions such as ``tf.cond`` branches (the larger branch counts).

    Example::

        train_op = opt.minimize(loss)
        assert count_collectives(train_op) == 1      # the status all-reduce, however many grads
    """
    flat = [f.op if isinstance(f, tf.Tensor) else f for f in tf.nest.flatten(fetches)]
    if not flat:
        return 0
    library = {f.signature.name: f for f in flat[0].graph.as_graph_def().library.function}
    memo = {}

    def in_function(name):
        if name not in memo:
            memo[name] = 0  # guards against recursion
            fdef = library.get(name)
            memo[name] = 0 if fdef is None else sum(
                _node_collectives(n.op, n.attr) for n in fdef.node_def)
        return memo[name]

    def _node_collectives(op_type, attrs):
        count = 1 if op_type in COLLECTIVE_OP_TYPES else 0
        branches = []
        for key in attrs:
            value = attrs[key]
            names = [value.func.name] if value.func.name else []
            names += [f.name for f in value.list.func]
            counts = [in_function(n) for n in names]
            if key in ("then_branch", "else_branch", "branches"):
                branches.extend(counts)
            else:
                count += sum(counts)
        return count + (max(branches) if branches else 0)

    stack, seen, total = list(flat), set(), 0
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        total += _node_collectives(op.type, op.node_def.attr)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return total


__all__ = [
    "AGREEMENT_NAMES", "TIMEOUT_ENV_VAR", "DEFAULT_TIMEOUT_SECONDS", "DEFAULT_GROUP_KEY",
    "DEFAULT_INSTANCE_KEY_BASE", "STATUS_ALLREDUCE_NAME", "COLLECTIVE_OP_TYPES",
    "AgreementError", "explain_failure", "failure_messages", "Agreement", "StrategyAgreement",
    "HcclAgreement", "HorovodAgreement", "configure_horovod_timeouts", "CollectiveCluster",
    "configure_collective", "get_collective_cluster", "CollectiveAgreement", "agreement_name",
    "make_agreement", "RanksMayDivergeWarning", "multi_worker_reason",
    "warn_if_ranks_may_diverge", "count_collectives",
]
