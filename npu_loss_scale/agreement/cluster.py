"""The group of processes that agreement ``collective`` all-reduces over, and the timeouts.

:class:`CollectiveCluster` is this process's place in a group of ``tf.distribute.Server`` tasks;
:func:`configure_collective` sets the process-wide group, :func:`get_collective_cluster` reads it
(else the one of ``TF_CONFIG``). The timeout rule (an argument, else
``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT``, else 300 s) is written here once, for every agreement and
for the ranks that ``python -m npu_loss_scale.emulate --ranks N`` starts.

Only TensorFlow and ``_internal`` are imported: the Ascend layer (``ascend/ranks.py`` and the
``npu_device`` shim) builds its ranks on this module without the rest of the agreements.
"""
import itertools
import json
import os
import threading

import tensorflow as tf

from npu_loss_scale._internal import checks as _checks

TIMEOUT_ENV_VAR = "NPU_LOSS_SCALE_AGREEMENT_TIMEOUT"
DEFAULT_TIMEOUT_SECONDS = 300.0

# A group key unlikely to collide with the keys tf.distribute allocates (it counts up from 1).
DEFAULT_GROUP_KEY = 0x4E4C53
# Instance keys of the status all-reduces count up from here, one per train op built.
DEFAULT_INSTANCE_KEY_BASE = 0x4E4C5300

_COLLECTIVE_JOBS = ("chief", "worker")


def timeout_from_env():
    """Seconds from ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT``, else :data:`DEFAULT_TIMEOUT_SECONDS`;
    raises ValueError naming the variable when it is not a number > 0."""
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


def timeout_seconds(value):
    """``value`` checked as seconds > 0, or :func:`timeout_from_env` when it is None."""
    if value is None:
        return timeout_from_env()
    return _checks.real_number("timeout", value, minimum=0.0, min_inclusive=False,
                               accepted="> 0 (seconds)")


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
        ``DeadlineExceededError`` (default ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT``, else 300);
        on TensorFlow 1.15, whose collectives cannot be stopped, the process exits with status
        124 instead.
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
        self.timeout = timeout_seconds(timeout)
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


__all__ = [
    "TIMEOUT_ENV_VAR", "DEFAULT_TIMEOUT_SECONDS", "DEFAULT_GROUP_KEY",
    "DEFAULT_INSTANCE_KEY_BASE", "CollectiveCluster", "configure_collective",
    "get_collective_cluster", "timeout_from_env", "timeout_seconds",
]
