"""Dying and slow peers: what the other ranks do when one is SIGKILLed, stalls, or starts late.

For each backend (``horovod``: Horovod with Gloo under ``horovodrun``; ``collective``: TF's
CollectiveReduceV2, one ``tf.distribute.Server`` per process) and each world size, a small
fp16 training run with ``is_distributed=True`` (rank 1 overflows at some steps, so every rank
skips them) meets one fault of rank ``--fault-rank`` at step ``--fault-step``:

``kill``     the parent sends it SIGKILL as soon as it begins that step;
``stall``    it sleeps ``timeout + --stall-extra`` seconds before that step (alive, silent);
``late``     it starts ``--late-seconds`` after the others (within the timeout): all proceed;
``late-beyond`` it starts ``timeout + --stall-extra`` seconds late: the others give up;
``none``     no fault (the baseline).

Checked for every run: nothing hangs (a hard limit kills whatever is left and counts as a
failure of the check); the surviving ranks either complete every step (``none``, ``late``) or
fail with an :class:`npu_loss_scale.agreement.AgreementError` naming the backend and the
timeout, within ``timeout + --margin`` seconds of the fault (under Horovod a rank may instead be
stopped by ``horovodrun`` once a peer exited, which is just as bounded); and every step that
more than one rank completed left the same decision, loss scale, counters, ``global_step`` and
variables on all of them - no rank applied a step another skipped.

One exception, named in the result (``tf_crashes``): under TF collectives, a surviving rank
that TensorFlow itself kills (SIGSEGV, or SIGABRT from a failed check of its own locks) while
its CollectiveReduceV2 aborts on the timeout of a stall (TF 2.21 does so in about one 4-rank
stall run in three) is counted as TensorFlow's crash, only when that rank's own log shows TF's
abort messages and another survivor raised the AgreementError; the step-state check still
covers every step that rank completed.

On TensorFlow 1.15, whose CollectiveReduce takes no timeout and cannot be stopped, a surviving
rank under TF collectives ends with status 124 instead, after the package's deadline logged the
all-reduce it waited in and the timeout (``npu_loss_scale._internal.deadlines``); that counts
as failing clearly, within the same limit (named in the result: ``deadline_exits``).

Usage::

    python scripts/peer_failures.py                         # the whole matrix (README figures)
    python scripts/peer_failures.py --backends collective --sizes 2 --faults kill,stall

Prints one line per run and exits non-zero if a check failed.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from npu_loss_scale._internal import deadlines
from npu_loss_scale.ascend.ranks import free_ports

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
LOOPBACK = "127.0.0.1"
ERROR_EXIT = 3
FAULTS = ("none", "kill", "stall", "late", "late-beyond")
BACKENDS = ("horovod", "collective")
BATCH, DIN, DOUT = 4, 3, 2
OVERFLOW_STEPS = (1, 4)


# -- the worker (one rank) ------------------------------------------------------------------------
def _append(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()


def _write_json(path, payload):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, sort_keys=True)
    os.replace(tmp, path)


def worker_main(args):
    os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")
    rank = int(os.environ.get("HOROVOD_RANK", os.environ.get("NLS_RANK", "0")))
    out = args.out
    with open(os.path.join(out, "pid.%d" % rank), "w") as f:
        f.write(str(os.getpid()))
    progress = os.path.join(out, "progress.%d" % rank)
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import npu_loss_scale as nls  # pylint: disable=import-outside-toplevel
    from npu_loss_scale import agreement  # pylint: disable=import-outside-toplevel
    if args.backend == "horovod":
        import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
    if rank == args.fault_rank and args.fault in ("late", "late-beyond"):
        _append(progress, "late %f" % time.time())
        time.sleep(args.late_seconds)      # after the imports: exactly this late

    _append(progress, "joining %f" % time.time())
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                      inter_op_parallelism_threads=2)
    if args.backend == "horovod":
        agreement.configure_horovod_timeouts(args.timeout)
        hvd.init()
        target = ""
    else:
        cluster = agreement.configure_collective(timeout=args.timeout)     # from TF_CONFIG
        server = cluster.start_server(config)
        config = cluster.session_config(config)
        target = server.target
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [BATCH, DIN])
        t = tf.compat.v1.placeholder(tf.float32, [BATCH, DOUT])
        w = tf.compat.v1.get_variable(
            "w", initializer=np.linspace(-0.5, 0.5, DIN * DOUT).reshape(DIN, DOUT)
            .astype(np.float32), use_resource=True)
        y16 = nls.saturate(tf.cast(tf.matmul(x, w), tf.float16))
        loss = tf.reduce_mean(tf.square(tf.cast(y16, tf.float32) - t))
        mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=1024, incr_every_n_steps=2,
                                                    decr_every_n_nan_or_inf=1, decr_ratio=0.5)
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.05), mgr,
                                        is_distributed=True)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        scale, good, bad = mgr.variables
        finite = opt.overflow_status_reduce_all
        # read in a run of its own after the step: read in the step's run, a variable may be
        # read before its update on one rank and after it on another
        state = {"loss_scale": tf.identity(scale),
                 "good_steps": tf.identity(good), "bad_steps": tf.identity(bad),
                 "skipped_steps": tf.identity(opt.skipped_steps), "global_step": tf.identity(gs),
                 "w": tf.identity(w)}
        init = tf.compat.v1.global_variables_initializer()
    records = []
    results = os.path.join(out, "rank%d.json" % rank)
    with tf.compat.v1.Session(target, graph=graph, config=config) as sess:
        sess.run(init)
        for step in range(args.steps):
            if rank == args.fault_rank and step == args.fault_step and args.fault == "stall":
                _append(progress, "stall %d %f" % (step, time.time()))
                time.sleep(args.stall_seconds)
            rng = np.random.RandomState(100 + step)
            xv = rng.uniform(-1, 1, (BATCH, DIN)).astype(np.float32)
            tv = rng.uniform(-1, 1, (BATCH, DOUT)).astype(np.float32)
            if rank == 1 and step in OVERFLOW_STEPS:
                xv = xv * np.float32(1e6)
            _append(progress, "begin %d %f" % (step, time.time()))
            started = time.time()
            try:
                with agreement.failure_messages():
                    _, values = sess.run([train, {"finite": finite}], {x: xv, t: tv})
                    values.update(sess.run(state))
            except Exception as err:  # pylint: disable=broad-except
                error = {"rank": rank, "step": step, "type": type(err).__name__,
                         "message": str(err), "at": time.time(),
                         "seconds": time.time() - started,
                         "backend": getattr(err, "backend", None),
                         "timeout": getattr(err, "timeout", None)}
                _write_json(os.path.join(out, "rank%d.error.json" % rank), error)
                print("peer_failures rank %d: %s" % (rank, str(err)[:600]), file=sys.stderr,
                      flush=True)
                sys.stdout.flush()
                os._exit(ERROR_EXIT)  # pylint: disable=protected-access
            rec = {"step": step}
            for key, value in values.items():
                value = np.asarray(value)
                rec[key] = value.tobytes().hex() if key == "w" else value.item()
            records.append(rec)
            _write_json(results, records)
            _append(progress, "end %d %f" % (step, time.time()))
    _append(progress, "done %f" % time.time())
    sys.stdout.flush()
    os._exit(0)  # pylint: disable=protected-access  # (Horovod's shutdown can take seconds)


# -- the launcher ----------------------------------------------------------------------------------
def _env(extra=None):
    env = dict(os.environ)
    for var in ("TF_CONFIG", "HOROVOD_GLOO_TIMEOUT_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS",
                "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "NPU_LOSS_SCALE_AGREEMENT_TIMEOUT"):
        env.pop(var, None)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["NPU_LOSS_SCALE_BACKEND"] = "emulation"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def _progress(out, rank):
    path = os.path.join(out, "progress.%d" % rank)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split() for line in f.read().splitlines() if line.strip()]


def _pid(out, rank):
    try:
        with open(os.path.join(out, "pid.%d" % rank)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _alive_worker(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return HERE.encode() in f.read()
    except OSError:
        return False


def _kill_leftovers(out, n):
    for rank in range(n):
        pid = _pid(out, rank)
        if pid is not None and _alive_worker(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def run_scenario(backend, n, fault, timeout, out, *, fault_rank=1, fault_step=3, steps=6,
                 late_seconds=None, stall_extra=10.0, hard_limit=None):
    """Runs one scenario in directory ``out`` (emptied first); returns a dict describing what
    happened."""
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    if fault not in FAULTS:
        raise ValueError("fault must be one of %s; got %r" % (FAULTS, fault))
    if late_seconds is None:
        late_seconds = timeout + stall_extra if fault == "late-beyond" else timeout / 3.0
    hard_limit = hard_limit or (timeout + stall_extra) * 2 + 90
    worker = ["--worker", "--backend", backend, "--out", out, "--timeout", str(timeout),
              "--fault", fault, "--fault-rank", str(fault_rank), "--fault-step", str(fault_step),
              "--steps", str(steps), "--stall-seconds", str(timeout + stall_extra),
              "--late-seconds", str(late_seconds)]
    procs, logs = [], []
    start = time.time()
    if backend == "horovod":
        horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
        cmd = [horovodrun, "-np", str(n), "-H", "localhost:%d" % n, "--gloo",
               "--network-interfaces", "lo", "--start-timeout", "60",
               sys.executable, HERE] + worker
        log = open(os.path.join(out, "log.horovodrun.txt"), "w+")
        logs.append(log)
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, env=_env()))
    else:
        ports = free_ports(n)
        cluster = {"worker": ["%s:%d" % (LOOPBACK, p) for p in ports]}
        for rank in range(n):
            tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker",
                                                                  "index": rank}})
            log = open(os.path.join(out, "log.rank%d.txt" % rank), "w+")
            logs.append(log)
            procs.append(subprocess.Popen(
                [sys.executable, HERE] + worker, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
                env=_env({"TF_CONFIG": tf_config, "NLS_RANK": str(rank)})))
    fault_at = None
    hung = []       # the ranks still running at the hard limit (then killed)
    try:
        while any(p.poll() is None for p in procs):
            now = time.time()
            if now - start > hard_limit:
                hung = [rank for rank in range(n)
                        if _pid(out, rank) is not None and _alive_worker(_pid(out, rank))]
                hung = hung or ["launcher"]
                break
            if fault == "kill" and fault_at is None:
                if ["begin", str(fault_step)] in [p[:2] for p in _progress(out, fault_rank)]:
                    pid = _pid(out, fault_rank)
                    os.kill(pid, signal.SIGKILL)
                    fault_at = time.time()
            time.sleep(0.005)
    finally:
        _kill_leftovers(out, n)
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
            p.wait()
    output = ""
    for log in logs:
        log.seek(0)
        output += log.read()
        log.close()
    if fault == "stall":
        marks = [float(p[2]) for p in _progress(out, fault_rank) if p[0] == "stall"]
        fault_at = marks[0] if marks else None
    elif fault == "late-beyond":
        # the others wait for the late rank from the moment they join
        joins = [float(p[1]) for r in range(n) if r != fault_rank
                 for p in _progress(out, r) if p[0] == "joining"]
        fault_at = max(joins) if joins else None
    ranks = []
    for rank in range(n):
        path = os.path.join(out, "rank%d.json" % rank)
        records = json.load(open(path)) if os.path.exists(path) else []
        err_path = os.path.join(out, "rank%d.error.json" % rank)
        error = json.load(open(err_path)) if os.path.exists(err_path) else None
        ended = [float(p[-1]) for p in _progress(out, rank) if p and p[0] in ("done",)]
        log_path = os.path.join(out, "log.rank%d.txt" % rank)
        log = open(log_path).read() if os.path.exists(log_path) else ""
        ranks.append({"records": records, "error": error, "done": bool(ended), "log": log})
    return {"backend": backend, "n": n, "fault": fault, "timeout": timeout,
            "fault_rank": fault_rank, "fault_step": fault_step, "steps": steps,
            "returncodes": [p.returncode for p in procs], "hung": hung, "fault_at": fault_at,
            "elapsed": time.time() - start, "ranks": ranks, "output": output,
            "late_seconds": late_seconds}


# What a rank's own log shows when TensorFlow's collective executor aborts on its timeout.
TF_ABORT_MARKS = ("BaseCollectiveExecutor::StartAbort", "Aborting RingReduce")


def _tf_abort_crash(code, log, fault):
    """Whether a rank that left no error was killed by TensorFlow while its collective aborted:
    SIGSEGV, or SIGABRT from a failed check in TF's own locking, in a stall, after its log
    shows the abort."""
    return (fault == "stall" and code in (-signal.SIGSEGV, -signal.SIGABRT)
            and any(mark in log for mark in TF_ABORT_MARKS))


def _deadline_exit(code, log, timeout):
    """Seconds a rank waited before the package's deadline ended it with status 124 (TF 1.15
    collectives, which take no timeout), from its log; None when it did not end so."""
    said = re.search(r"waited ([0-9.]+) s, more than its timeout of %s s" % re.escape(
        "%g" % timeout), log)
    if code != deadlines.EXIT_STATUS or said is None:
        return None
    return float(said.group(1))


def check(result, margin=60.0):
    """The problems of a scenario's result (an empty list when it behaved)."""
    problems = []
    n, fault, backend, timeout = (result["n"], result["fault"], result["backend"],
                                  result["timeout"])
    ranks = result["ranks"]
    hung = result["hung"]
    if fault == "late-beyond" and hung == [result["fault_rank"]]:
        # Known: under TF collectives a task that arrives after its group gave up keeps retrying
        # to reach the (gone) group leader; the others already failed as they should.
        hung = []
    if hung:
        problems.append("ranks %s were still running at the hard limit (hung)" % hung)
    survivors = [r for r in range(n) if not (fault == "kill" and r == result["fault_rank"])]
    expect_success = fault in ("none", "late")
    # every step completed by several ranks: identical decision and state everywhere
    by_step = {}
    for rank in range(n):
        for rec in ranks[rank]["records"]:
            by_step.setdefault(rec["step"], {})[rank] = rec
    for step, recs in sorted(by_step.items()):
        values = list(recs.values())
        if any(v != values[0] for v in values[1:]):
            problems.append("step %d left different states on ranks %s" % (step, sorted(recs)))
    for step in OVERFLOW_STEPS:
        for rank, rec in by_step.get(step, {}).items():
            if rec["finite"]:
                problems.append("rank %d applied step %d, which rank 1 overflowed" % (rank, step))
    if expect_success:
        for rank in range(n):
            if not ranks[rank]["done"] or len(ranks[rank]["records"]) != result["steps"]:
                problems.append("rank %d did not complete its %d steps (error: %s)" % (
                    rank, result["steps"], (ranks[rank]["error"] or {}).get("message", "")[:300]))
        return problems
    limit = timeout + margin
    for rank in survivors:
        info = ranks[rank]
        if info["done"]:
            problems.append("rank %d completed every step although rank %d %s"
                            % (rank, result["fault_rank"], fault))
            continue
        error = info["error"]
        if error is None:
            # Horovod: horovodrun stops the job once a rank exited abnormally
            if backend == "horovod" and "Exit code" in result["output"] \
                    and result["returncodes"][0] != 0:
                continue
            if rank == result["fault_rank"]:
                continue
            code = result["returncodes"][rank] if backend == "collective" else None
            if _tf_abort_crash(code, info.get("log", ""), fault) and any(
                    (ranks[r]["error"] or {}).get("type") == "AgreementError"
                    for r in survivors if r != result["fault_rank"]):
                # TensorFlow's own crash, not a silent rank: TF 2.21's CollectiveReduceV2
                # sometimes crashes while aborting on its timeout (about one 4-rank stall run
                # in three); the other survivors raised the AgreementError, and no rank
                # applied a step another skipped (checked above)
                result.setdefault("tf_crashes", []).append(rank)
                continue
            waited = _deadline_exit(code, info.get("log", ""), timeout)
            if backend == "collective" and waited is not None:
                # TF 1.15: the deadline watchdog named the all-reduce and the timeout, then
                # ended the process (nothing else gets a rank out of 1.15's CollectiveReduce)
                if waited > limit:
                    problems.append("rank %d waited %.0f s before its deadline ended it "
                                    "(limit %.0f s)" % (rank, waited, limit))
                result.setdefault("deadline_exits", []).append(rank)
                continue
            problems.append("rank %d stopped without a clear error%s" % (
                rank, " (killed by signal %d)" % -code if code is not None and code < 0
                else ""))
            continue
        if rank == result["fault_rank"] and fault in ("stall", "late-beyond"):
            continue    # the slow rank itself finds the others gone; its time is its own
        if error.get("type") != "AgreementError":
            problems.append("rank %d failed with %s, not AgreementError: %s"
                            % (rank, error.get("type"), error.get("message", "")[:300]))
        else:
            message = error["message"]
            if "'%s'" % backend not in message:
                problems.append("rank %d's error does not name the backend: %s"
                                % (rank, message[:300]))
            if backend == "collective" and "timeout of %g s" % timeout not in message:
                problems.append("rank %d's error does not name the timeout: %s"
                                % (rank, message[:300]))
            if backend == "horovod" and "Timeout: %g s" % timeout not in message:
                problems.append("rank %d's error does not name the timeout: %s"
                                % (rank, message[:300]))
        if result["fault_at"] is not None and error.get("at") is not None:
            waited = error["at"] - result["fault_at"]
            if waited > limit:
                problems.append("rank %d failed %.0f s after the fault (limit %.0f s)"
                                % (rank, waited, limit))
    return problems


def survivor_seconds(result):
    """Each surviving rank's seconds from the fault to its error, as text: ``"-"`` when it had
    none, ``"124 after W"`` when the deadline ended it after it waited W s in the all-reduce."""
    out = []
    for rank, info in enumerate(result["ranks"]):
        if rank == result["fault_rank"]:
            continue
        error = info["error"]
        waited = _deadline_exit(result["returncodes"][rank], info.get("log", ""),
                                result["timeout"])
        if waited is not None:
            out.append("124 after %.1f" % waited)
        elif error is None or result["fault_at"] is None:
            out.append("-")
        else:
            out.append("%.1f" % (error["at"] - result["fault_at"]))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", choices=BACKENDS, default="collective")
    p.add_argument("--out", default=None)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--stall-seconds", type=float, default=20.0)
    p.add_argument("--late-seconds", type=float, default=None)
    p.add_argument("--backends", default="collective,horovod")
    p.add_argument("--sizes", default="2,4")
    p.add_argument("--faults", default="kill,stall,late,late-beyond")
    p.add_argument("--stall-extra", type=float, default=10.0,
                   help="how far past the timeout a stall or a late start lasts (seconds)")
    p.add_argument("--margin", type=float, default=60.0,
                   help="survivors must fail within timeout + margin seconds of the fault")
    args = p.parse_args(argv)
    if args.worker:
        return worker_main(args)
    work = args.out or tempfile.mkdtemp(prefix="peer_failures_")
    failed = 0
    print("%-10s %2s %-12s %8s  %-8s %s" % ("backend", "n", "fault", "timeout", "verdict",
                                             "survivors failed after (s) / notes"))
    for backend in [b for b in args.backends.split(",") if b]:
        for n in [int(s) for s in args.sizes.split(",") if s]:
            for fault in [f for f in args.faults.split(",") if f]:
                out = os.path.join(work, "%s-%d-%s" % (backend, n, fault))
                result = run_scenario(backend, n, fault, args.timeout, out,
                                      fault_rank=args.fault_rank, fault_step=args.fault_step,
                                      steps=args.steps, stall_extra=args.stall_extra)
                problems = check(result, args.margin)
                failed += bool(problems)
                secs = survivor_seconds(result)
                if fault in ("none", "late"):
                    note = "all %d ranks completed %d steps in %.0f s" % (
                        n, result["steps"], result["elapsed"])
                else:
                    note = ", ".join(secs)
                    if backend == "horovod" and "-" in secs:
                        note += " (- : stopped by horovodrun)"
                if result["hung"]:
                    note += " (rank %s still waiting at the hard limit, killed)" % ",".join(
                        str(r) for r in result["hung"])
                print("%-10s %2d %-12s %7gs  %-8s %s" % (backend, n, fault, args.timeout,
                                                        "ok" if not problems else "FAILED",
                                                        note), flush=True)
                for problem in problems:
                    print("    " + problem, flush=True)
    print("peer_failures: %s (work directory %s)" % ("all checks passed" if not failed else
                                                     "%d runs FAILED" % failed, work))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
