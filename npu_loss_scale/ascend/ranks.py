"""N emulated ranks: ``python -m npu_loss_scale.emulate --ranks N script.py`` on one CPU machine.

The launcher starts N processes of the script with the environment Ascend launch scripts set —
``RANK_ID``, ``RANK_SIZE``, ``DEVICE_ID``, ``ASCEND_DEVICE_ID`` — plus a ``TF_CONFIG`` naming a
cluster of N local workers. In each process, before the script runs, :func:`join` gives the
task's address a server and makes every ``tf.compat.v1.Session`` the script creates without a
target run on it (with the collective-group settings), so that:

* the shim's HCCL ops (``hccl_ops.allreduce/broadcast/allgather``, ``NPUDistributedOptimizer``,
  ``NPUBroadcastGlobalVariablesHook``) run as TensorFlow collective ops across the processes;
* ``NPULossScaleOptimizer(..., is_distributed=True)`` agrees on overflow through the same group
  (agreement ``collective``, discovered from ``TF_CONFIG``).

In TF2 mode (no ``--tf1``) the server is the eager context's own: collective ops also run
eagerly and inside ``tf.function``s, which ``npu_device.distribute`` and npu_device's
``NpuLossScaleOptimizer`` use once ``npu_device.open()`` has opened the device. In TF1 mode it
is a ``tf.distribute.Server``.

If one rank fails, the others are stopped.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

from npu_loss_scale._internal import env as rank_env

_state = {}  # cluster, session target, eager (the eager context is the task)
_patched = []


def free_ports(n):
    """``n`` TCP ports that were free on loopback a moment ago."""
    sockets, ports = [], []
    for _ in range(n):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        ports.append(sock.getsockname()[1])
    for sock in sockets:
        sock.close()
    return ports


def rank_environments(n, base_env=None):
    """The environment of each of ``n`` ranks (Ascend variables plus TF_CONFIG)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("--ranks must be an int >= 1; got %r" % (n,))
    workers = ["127.0.0.1:%d" % port for port in free_ports(n)]
    envs = []
    for rank in range(n):
        env = dict(os.environ if base_env is None else base_env)
        env.update(RANK_ID=str(rank), RANK_SIZE=str(n), DEVICE_ID=str(rank),
                   ASCEND_DEVICE_ID=str(rank), LOCAL_RANK_SIZE=str(n), LOCAL_RANK_ID=str(rank),
                   TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                         "task": {"type": "worker", "index": rank}}))
        envs.append(env)
    return envs


def start_ranks(n, child_args, streams, base_env=None, cwd=None):
    """Starts ``python -m npu_loss_scale.emulate *child_args`` as ``n`` ranks; returns their
    ``Popen`` objects.

    ``streams(rank)`` gives the ``(stdout, stderr)`` of a rank's process (``subprocess.PIPE``
    or open files); ``base_env`` the environment the rank variables are added to (default this
    process's). Pipes are text, undecodable bytes replaced. If a rank cannot be started, those
    already running are killed.
    """
    procs = []
    try:
        for rank, env in enumerate(rank_environments(n, base_env)):
            env["PYTHONUNBUFFERED"] = "1"
            stdout, stderr = streams(rank)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "npu_loss_scale.emulate"] + list(child_args), env=env,
                cwd=cwd, stdout=stdout, stderr=stderr, text=True, errors="replace"))
    except BaseException:
        _kill_running(procs)
        raise
    return procs


def wait_ranks(procs, timeout=None, grace=0.0, poll_seconds=0.2, kill=False):
    """Waits for the ranks ``procs`` of :func:`start_ranks`; ``(codes, first_failures, timed_out)``.

    When a rank exits non-zero the others would wait for it in a collective: they get ``grace``
    seconds to exit on their own, then are stopped (``terminate()``, or ``kill()`` with
    ``kill=True``). After ``timeout`` seconds (None: no limit) every rank still running is killed
    and listed in ``timed_out``. ``codes`` are the exit codes of all ranks; ``first_failures``
    the non-zero codes seen at the poll that first saw one (in rank order), before any rank was
    stopped. If waiting is interrupted (an exception), the ranks still running are killed.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    codes, first_failures, timed_out = [None] * len(procs), [], set()

    def poll():
        for rank, proc in enumerate(procs):
            if codes[rank] is None:
                codes[rank] = proc.poll()

    def running_until(end):
        return any(c is None for c in codes) and (end is None or time.monotonic() < end)

    try:
        while running_until(deadline):
            poll()
            first_failures = [c for c in codes if c not in (None, 0)]
            if first_failures:
                end = time.monotonic() + grace
                end = end if deadline is None else min(end, deadline)
                while running_until(end):
                    time.sleep(poll_seconds)
                    poll()
                break
            time.sleep(poll_seconds)
        for rank, proc in enumerate(procs):
            if codes[rank] is None:
                if deadline is not None and time.monotonic() >= deadline:
                    timed_out.add(rank)
                    proc.kill()
                else:
                    (proc.kill if kill else proc.terminate)()
                codes[rank] = proc.wait()
    finally:
        _kill_running(procs)
    return codes, first_failures, timed_out


def _kill_running(procs):
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def launch(n, child_args, poll_seconds=0.2):
    """Runs ``python -m npu_loss_scale.emulate *child_args`` as ``n`` ranks; the exit code.

    Every rank's output is forwarded to this process's stdout/stderr line by line, so each line
    a script prints stays whole, and starts with the rank: ``[0] ...``, ``[1] ...`` (see
    :func:`tag`). The first non-zero exit code of a rank stops the others and is returned.
    """
    pumps = []
    lock = threading.Lock()
    procs = start_ranks(n, child_args, lambda rank: (subprocess.PIPE, subprocess.PIPE))
    for rank, proc in enumerate(procs):
        for source, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            pump = threading.Thread(target=_pump, args=(source, sink, lock, tag(rank)),
                                    daemon=True)
            pump.start()
            pumps.append(pump)
    _, first_failures, _ = wait_ranks(procs, poll_seconds=poll_seconds)
    _drain(pumps)
    return first_failures[0] if first_failures else 0


def tag(rank):
    """The prefix of the lines rank ``rank`` prints under ``--ranks``: ``"[<rank>] "``."""
    return "[%d] " % rank


def _pump(source, sink, lock, prefix):
    for line in source:
        with lock:
            sink.write(prefix + line)
            sink.flush()


def _drain(pumps):
    for pump in pumps:
        pump.join(timeout=30)


def join(eager=False):
    """In a rank started by :func:`launch`: give the task's address a server and route sessions
    to it.

    ``eager=False`` (TF1 mode, ``--tf1``): a ``tf.distribute.Server`` of the task. ``eager=True``
    (TF2 mode): the eager context itself becomes the task (``enable_collective_ops`` with the
    ``TF_CONFIG`` cluster, task 0 leading the group), so collective ops placed on this task's
    device run across the processes eagerly and inside ``tf.function``s; its server also runs
    the sessions. It must happen before the script creates a variable: a variable made before
    lives on the old ``/job:localhost`` device, which the eager context no longer has.

    Either way every ``tf.compat.v1.Session`` created without a target runs on the task's server
    with the collective-group settings. Returns the
    :class:`npu_loss_scale.agreement.CollectiveCluster`, or None when this process is not part
    of a multi-rank run.
    """
    if _state:
        return _state["cluster"]
    try:
        size = rank_env.rank_size()
    except ValueError:     # not set by the --ranks launcher: not a rank of several
        return None
    if size <= 1 or not os.environ.get("TF_CONFIG"):
        return None
    from tensorflow.python.client import (  # pylint: disable=import-outside-toplevel
        session as session_lib)
    from npu_loss_scale.agreement import (  # pylint: disable=import-outside-toplevel
        cluster as agreement)
    cluster = agreement.get_collective_cluster()
    if cluster is None:
        return None
    if eager:
        _join_eager(cluster)
        target = "grpc://" + cluster.cluster_spec.task_address(cluster.task_type, cluster.task_id)
    else:
        target = cluster.start_server().target
    _state.update(cluster=cluster, target=target, eager=bool(eager))
    original = session_lib.BaseSession.__init__

    def __init__(self, target="", graph=None, config=None):
        if not target:
            target = _state["target"]
            config = cluster.session_config(config)
        original(self, target, graph, config)

    session_lib.BaseSession.__init__ = __init__
    _patched.append((session_lib.BaseSession, original))
    return cluster


def _join_eager(cluster):
    import logging  # pylint: disable=import-outside-toplevel
    from tensorflow.core.protobuf import (  # pylint: disable=import-outside-toplevel
        tensorflow_server_pb2)
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    address = cluster.cluster_spec.task_address(cluster.task_type, cluster.task_id)
    server_def = tensorflow_server_pb2.ServerDef(
        cluster=cluster.cluster_spec.as_cluster_def(),
        default_session_config=cluster.session_config(), job_name=cluster.task_type,
        task_index=cluster.task_id, protocol="grpc", port=int(address.rsplit(":", 1)[1]))
    # Done before the script runs, so no tensor of the old context exists: TF's warning that
    # such tensors may become unusable does not apply.
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)
    try:
        context.context().enable_collective_ops(server_def)
    finally:
        tf_logger.setLevel(level)
    context.context().ensure_initialized()


def eager_joined():
    """Whether :func:`join` made this process's eager context the task of the cluster."""
    return bool(_state.get("eager"))


def cluster():
    """The CollectiveCluster of this rank after :func:`join`, else None."""
    return _state.get("cluster")


__all__ = [
    "free_ports", "rank_environments", "launch", "tag", "join", "eager_joined", "cluster",
]
