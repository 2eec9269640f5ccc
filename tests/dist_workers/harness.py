"""Starts multi-process runs on loopback for the tests, bounded in time, and reads their output.

Every run is bounded twice: the agreement timeout makes surviving ranks fail by themselves, and
a hard deadline here kills whatever is left (by process id: each worker writes its pid file).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "train_worker.py")
LOOPBACK = "127.0.0.1"


def free_ports(count):
    """``count`` TCP ports that were free on loopback a moment ago."""
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def worker_env(extra=None):
    env = dict(os.environ)
    for var in ("TF_CONFIG", "HOROVOD_GLOO_TIMEOUT_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS",
                "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "NPU_LOSS_SCALE_AGREEMENT_TIMEOUT"):
        env.pop(var, None)   # each run sets its own timeouts
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["NPU_LOSS_SCALE_BACKEND"] = "emulation"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def horovodrun_path():
    return os.path.join(os.path.dirname(sys.executable), "horovodrun")


class Result:
    """What a multi-process run left: exit codes, output, and each rank's JSON."""

    def __init__(self, out_dir, returncodes, output, timed_out):
        self.out_dir = out_dir
        self.returncodes = returncodes
        self.output = output
        self.timed_out = timed_out

    def ranks(self, n):
        return [self.load(r) for r in range(n)]

    def completed_ranks(self, n, returncodes):
        """Checks the run finished in time with ``returncodes``; returns its ``n`` ranks' JSON."""
        assert not self.timed_out, "the run outlived its deadline:\n" + self.tail()
        assert self.returncodes == returncodes, self.tail()
        return self.ranks(n)

    def load(self, rank):
        path = os.path.join(self.out_dir, "rank%d.json" % rank)
        if not os.path.exists(path):
            raise AssertionError("rank %d wrote no results; output:\n%s" % (rank, self.tail()))
        with open(path) as f:
            return json.load(f)

    def error(self, rank):
        path = os.path.join(self.out_dir, "rank%d.error.json" % rank)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)

    def tail(self, chars=6000):
        return self.output[-chars:]


def _kill_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _is_our_worker(pid, out_dir):
    """True if ``pid`` is still a train_worker.py process writing to ``out_dir`` (a pid can be
    reused by an unrelated process once ours has exited)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            args = f.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return False
    return WORKER in args and out_dir in args


def _kill_stragglers(out_dir):
    """Kills this run's worker processes that are still alive, by the pids they wrote."""
    for name in os.listdir(out_dir):
        if not name.startswith("pid."):
            continue
        try:
            with open(os.path.join(out_dir, name)) as f:
                pid = int(f.read().strip())
        except (ValueError, OSError):
            continue
        if _is_our_worker(pid, out_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _wait_all(procs, deadline):
    timed_out = False
    for proc in procs:
        remaining = max(0.1, deadline - time.time())
        try:
            proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for proc in procs:
            if proc.poll() is None:
                _kill_group(proc, signal.SIGTERM)
        time.sleep(3)
        for proc in procs:
            if proc.poll() is None:
                _kill_group(proc, signal.SIGKILL)
            proc.wait()
    return timed_out


def run_collective(tmp_path, n=2, worker_args=(), per_rank_args=None, start_ranks=None,
                   deadline=240, env=None):
    """Starts one worker per TF task (cluster of ``n`` workers on loopback via TF_CONFIG).

    ``start_ranks``: the ranks actually started (default all) - leave one out to test a rank
    that never joins. ``per_rank_args``: {rank: [extra args]}.
    """
    out_dir = str(tmp_path)
    os.makedirs(out_dir, exist_ok=True)
    ports = free_ports(n)
    cluster = {"worker": ["%s:%d" % (LOOPBACK, p) for p in ports]}
    procs, logs = [], []
    start_ranks = range(n) if start_ranks is None else start_ranks
    for rank in start_ranks:
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": rank}})
        log = open(os.path.join(out_dir, "log.rank%d.txt" % rank), "w+")
        logs.append(log)
        cmd = [sys.executable, WORKER, "--launcher", "collective", "--out", out_dir]
        cmd += list(worker_args) + list((per_rank_args or {}).get(rank, []))
        procs.append(subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=worker_env(dict(env or {}, TF_CONFIG=tf_config, NLS_PID_FILE=os.path.join(
                out_dir, "pid.%d" % rank)))))
    try:
        timed_out = _wait_all(procs, time.time() + deadline)
    finally:
        _kill_stragglers(out_dir)
    output = ""
    for log in logs:
        log.seek(0)
        output += log.read()
        log.close()
    return Result(out_dir, [p.returncode for p in procs], output, timed_out)


def run_horovod(tmp_path, n=2, worker_args=(), deadline=300, env=None, horovodrun_args=()):
    """``horovodrun -np n -H localhost:n --gloo python train_worker.py --launcher horovod``."""
    out_dir = str(tmp_path)
    os.makedirs(out_dir, exist_ok=True)
    cmd = [horovodrun_path(), "-np", str(n), "-H", "localhost:%d" % n, "--gloo",
           "--network-interfaces", "lo", "--start-timeout", "60"] + list(horovodrun_args)
    cmd += [sys.executable, WORKER, "--launcher", "horovod", "--out", out_dir]
    cmd += list(worker_args)
    log = open(os.path.join(out_dir, "log.horovodrun.txt"), "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=worker_env(dict(env or {}, NLS_PID_DIR=out_dir)))
    try:
        timed_out = _wait_all([proc], time.time() + deadline)
    finally:
        _kill_stragglers(out_dir)
    log.seek(0)
    output = log.read()
    log.close()
    return Result(out_dir, [proc.returncode], output, timed_out)


def run_example_with_horovodrun(tmp_path, script, n=2, script_args=(), deadline=240):
    """``horovodrun -np n -H localhost:n --gloo python <script> ...``; returns (rc, output)."""
    out_dir = str(tmp_path)
    os.makedirs(out_dir, exist_ok=True)
    cmd = [horovodrun_path(), "-np", str(n), "-H", "localhost:%d" % n, "--gloo",
           "--network-interfaces", "lo", "--start-timeout", "60", sys.executable, script]
    cmd += list(script_args)
    log = open(os.path.join(out_dir, "log.example.txt"), "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=worker_env())
    timed_out = _wait_all([proc], time.time() + deadline)
    log.seek(0)
    output = log.read()
    log.close()
    return Result(out_dir, [proc.returncode], output, timed_out)


def which_horovodrun():
    path = horovodrun_path()
    return path if os.path.exists(path) else shutil.which("horovodrun")


def horovod_unavailable_reason():
    """Why Horovod cannot run here (None when ``horovod.tensorflow`` and ``horovodrun`` are there)."""
    try:
        import horovod.tensorflow  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except Exception as err:  # pylint: disable=broad-except
        return "%s: %s" % (type(err).__name__, err)
    if which_horovodrun() is None:
        return "the horovodrun launcher is not installed next to the Python interpreter"
    return None


def horovod_pytestmark():
    """The marks of a Horovod test module: ``distributed``, and a skip saying why it cannot run.

    (test.sh fails a run on TF 2.15 that skips anything, so the skip is never silent there.)
    """
    import pytest  # pylint: disable=import-outside-toplevel
    reason = horovod_unavailable_reason()
    return [pytest.mark.distributed,
            pytest.mark.skipif(reason is not None,
                               reason="horovod is not importable here (%s); build it with "
                                      "`bash scripts/build_horovod.sh <venv>`" % reason)]
