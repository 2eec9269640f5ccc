"""N emulated ranks: ``python -m npu_loss_scale.emulate --ranks N script.py`` on one CPU machine.

The launcher starts N processes of the script with the environment Ascend launch scripts set —
``RANK_ID``, ``RANK_SIZE``, ``DEVICE_ID``, ``ASCEND_DEVICE_ID`` — plus a ``TF_CONFIG`` naming a
cluster of N local workers. In each process, :func:`join` starts the task's
``tf.distribute.Server`` and makes every ``tf.compat.v1.Session`` the script creates without a
target run on it (with the collective-group settings), so that:

* the shim's HCCL ops (``hccl_ops.allreduce/broadcast/allgather``, ``NPUDistributedOptimizer``,
  ``NPUBroadcastGlobalVariablesHook``) run as TensorFlow collective ops across the processes;
* ``NPULossScaleOptimizer(..., is_distributed=True)`` agrees on overflow through the same group
  (agreement ``collective``, discovered from ``TF_CONFIG``).

Graph mode (TF1 sessions, the Estimator) only. If one rank fails, the others are stopped.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

_server = []
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


def launch(n, child_args, poll_seconds=0.2):
    """Runs ``python -m npu_loss_scale.emulate *child_args`` as ``n`` ranks; the exit code.

    Every rank's output is forwarded to this process's stdout/stderr line by line, so each line
    a script prints stays whole. The first non-zero exit code of a rank stops the others and is
    returned.
    """
    procs, pumps = [], []
    lock = threading.Lock()
    for env in rank_environments(n):
        env["PYTHONUNBUFFERED"] = "1"
        proc = subprocess.Popen([sys.executable, "-m", "npu_loss_scale.emulate"]
                                + list(child_args), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace")
        procs.append(proc)
        for source, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            pump = threading.Thread(target=_pump, args=(source, sink, lock), daemon=True)
            pump.start()
            pumps.append(pump)
    codes = [None] * n
    while any(c is None for c in codes):
        for i, proc in enumerate(procs):
            if codes[i] is None:
                codes[i] = proc.poll()
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            for i, proc in enumerate(procs):
                if codes[i] is None:
                    proc.terminate()
            for i, proc in enumerate(procs):
                if codes[i] is None:
                    codes[i] = proc.wait()
            _drain(pumps)
            return failed[0]
        time.sleep(poll_seconds)
    _drain(pumps)
    return 0


def _pump(source, sink, lock):
    for line in source:
        with lock:
            sink.write(line)
            sink.flush()


def _drain(pumps):
    for pump in pumps:
        pump.join(timeout=30)


def join():
    """In a rank started by :func:`launch`: start the task's server and route sessions to it.

    Returns the :class:`npu_loss_scale.agreement.CollectiveCluster`, or None when this process
    is not part of a multi-rank run.
    """
    if _server:
        return _server[0][0]
    try:
        size = int(os.environ.get("RANK_SIZE", "1") or 1)
    except ValueError:
        return None
    if size <= 1 or not os.environ.get("TF_CONFIG"):
        return None
    from tensorflow.python.client import session as session_lib  # pylint: disable=import-outside-toplevel
    from .. import agreement  # pylint: disable=import-outside-toplevel
    cluster = agreement.get_collective_cluster()
    if cluster is None:
        return None
    server = cluster.start_server()
    _server.append((cluster, server))
    original = session_lib.BaseSession.__init__

    def __init__(self, target="", graph=None, config=None):
        if not target:
            target = server.target
            config = cluster.session_config(config)
        original(self, target, graph, config)

    session_lib.BaseSession.__init__ = __init__
    _patched.append((session_lib.BaseSession, original))
    return cluster


def cluster():
    """The CollectiveCluster of this rank after :func:`join`, else None."""
    return _server[0][0] if _server else None
