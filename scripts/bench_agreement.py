#!/usr/bin/env python
"""Per-step cost of overflow agreement, for each backend, measured in one run.

    python scripts/bench_agreement.py                 # every backend available here
    python scripts/bench_agreement.py --steps 200 --backends collective,horovod

For each backend the script starts 2 processes on loopback (``horovodrun --gloo`` for Horovod;
one ``tf.distribute.Server`` per process for TF collectives and MultiWorkerMirroredStrategy).
Inside the same processes it builds the same small model twice - one train op with
``is_distributed=False`` (the baseline: no agreement) and one with ``is_distributed=True`` - and
times blocks of steps of each, alternating, so both see the same machine load. It prints, per
backend: the median step time without and with agreement (ms), the difference, the ratio, and
the number of collectives one step runs (``tools.graph_checks.count_collectives``) without and with.

Baselines: under a ``tf.distribute`` strategy the optimizer always sums the status over the
replicas (that *is* the strategy's agreement), so the ``strategy`` baseline is the same step
with the plain inner optimizer (no loss scaling at all). ``hccl`` needs Ascend hardware.
Timing noise on a shared machine is easily +-50%: compare the rows of one run, not runs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import checkout

HERE = os.path.abspath(__file__)
BACKENDS = ("collective", "horovod", "horovod+avg", "strategy", "hccl")
N_LAYERS = 4        # 8 trainable variables: the agreement stays one collective
WIDTH = 128
BATCH = 32


# -- worker side ---------------------------------------------------------------------------------
def _worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    import npu_loss_scale as nls  # pylint: disable=import-outside-toplevel
    from npu_loss_scale import agreement  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.tools import graph_checks  # pylint: disable=import-outside-toplevel

    base = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                    inter_op_parallelism_threads=2)
    hvd = None
    target = ""
    session_config = base
    if args.backend.startswith("horovod"):
        import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
        agreement.configure_horovod_timeouts(args.timeout)
        hvd.init()
        rank = hvd.rank()
    else:
        cluster = agreement.configure_collective(timeout=args.timeout)  # from TF_CONFIG
        rank = cluster.rank
        server = cluster.start_server(base)
        target = server.target
        session_config = cluster.session_config(base)

    def model(x):
        h = x
        for i in range(N_LAYERS):
            w = tf.compat.v1.get_variable("w%d" % i, [WIDTH, WIDTH], use_resource=True,
                                          initializer=tf.compat.v1.glorot_uniform_initializer(seed=i))
            b = tf.compat.v1.get_variable("b%d" % i, [WIDTH], use_resource=True,
                                          initializer=tf.compat.v1.zeros_initializer())
            h = tf.nn.relu(tf.matmul(h, w) + b)
        y16 = nls.saturate(tf.cast(h, tf.float16))
        return tf.reduce_mean(tf.square(tf.cast(y16, tf.float32)))

    def make_opt(distributed, plain=False):
        inner = tf.compat.v1.train.GradientDescentOptimizer(1e-3)
        if args.backend == "horovod+avg":
            inner = hvd.DistributedOptimizer(inner)
        if plain:
            return inner
        mgr = nls.FixedLossScaleManager(1024)
        return nls.NPULossScaleOptimizer(inner, mgr, is_distributed=distributed)

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [BATCH, WIDTH])
        trains = {}
        if args.backend == "strategy":
            strategy = tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy()
            session_config = strategy.update_config_proto(session_config)
            for key, plain in (("off", True), ("on", False)):
                with strategy.scope(), tf.compat.v1.variable_scope(key):
                    opt = make_opt(True, plain=plain)
                    step = strategy.extended.call_for_each_replica(
                        lambda xx, o=opt: o.minimize(model(xx)), args=(x,))
                    trains[key] = strategy.group(step)
        else:
            for key, distributed in (("off", False), ("on", True)):
                with tf.compat.v1.variable_scope(key):
                    trains[key] = make_opt(distributed).minimize(model(x))
        counts = {key: graph_checks.count_collectives(op) for key, op in trains.items()}
        init = tf.compat.v1.global_variables_initializer()

    feed = {x: np.random.RandomState(rank).uniform(-1, 1, (BATCH, WIDTH)).astype(np.float32)}
    times = {"off": [], "on": []}
    with tf.compat.v1.Session(target, graph=graph, config=session_config) as sess:
        sess.run(init)
        for key in ("off", "on"):
            for _ in range(args.warmup):
                sess.run(trains[key], feed)
        blocks = 4
        per_block = max(1, args.steps // blocks)
        for _ in range(blocks):
            for key in ("off", "on"):
                for _ in range(per_block):
                    start = time.perf_counter()
                    sess.run(trains[key], feed)
                    times[key].append(time.perf_counter() - start)
    with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
        json.dump({"times": times, "collectives": counts}, f)
    sys.stdout.flush()
    os._exit(0)  # pylint: disable=protected-access


# -- launcher side -------------------------------------------------------------------------------
def _free_ports(n):
    import socket  # pylint: disable=import-outside-toplevel
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _env():
    env = checkout.environment()
    env.pop("TF_CONFIG", None)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["NPU_LOSS_SCALE_BACKEND"] = "emulation"
    return env


def _wait(procs, deadline):
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            # horovodrun stops its workers on SIGTERM; then make sure of everything we started
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            time.sleep(5)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            return False
    return all(p.returncode == 0 for p in procs)


def _launch(backend, args, out):
    worker = [sys.executable, HERE, "--worker", "--backend", backend, "--out", out,
              "--steps", str(args.steps), "--warmup", str(args.warmup),
              "--timeout", str(args.timeout)]
    deadline = time.time() + args.deadline
    log = open(os.path.join(out, "log.txt"), "w+")  # pylint: disable=consider-using-with
    if backend.startswith("horovod"):
        horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
        cmd = [horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", "--network-interfaces",
               "lo"] + worker
        procs = [subprocess.Popen(cmd, env=_env(), stdout=log, stderr=subprocess.STDOUT)]
    else:
        ports = _free_ports(2)
        cluster = {"worker": ["127.0.0.1:%d" % p for p in ports]}
        procs = []
        for index in range(2):
            env = _env()
            env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                           "task": {"type": "worker", "index": index}})
            procs.append(subprocess.Popen(worker, env=env, stdout=log, stderr=subprocess.STDOUT))
    ok = _wait(procs, deadline)
    log.seek(0)
    output = log.read()
    log.close()
    if not ok:
        lines = [l for l in output.strip().splitlines() if l.strip()]
        return None, lines[-1:] or ["timed out after %gs" % args.deadline]
    ranks = []
    for rank in range(2):
        with open(os.path.join(out, "rank%d.json" % rank)) as f:
            ranks.append(json.load(f))
    return ranks, None


def _unavailable(backend):
    if backend == "hccl":
        try:
            import npu_bridge.hccl.hccl_ops  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        except ImportError:
            return "needs npu_bridge (Ascend CANN toolkit) and an NPU"
        return "benchmark not implemented for HCCL (run it on the device with npu_bridge)"
    if backend.startswith("horovod"):
        try:
            import horovod.tensorflow  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        except Exception as err:  # pylint: disable=broad-except
            return "horovod does not import (%s); run scripts/build_horovod.sh" % (
                type(err).__name__,)
    return None


LABELS = {
    "collective": "collective (TF CollectiveReduceV2)",
    "horovod": "horovod (hvd.allreduce)",
    "horovod+avg": "horovod + hvd.DistributedOptimizer",
    "strategy": "strategy (MultiWorkerMirrored)*",
    "hccl": "hccl",
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--steps", type=int, default=100, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=60.0, help="agreement timeout (s)")
    parser.add_argument("--deadline", type=float, default=300.0, help="per backend (s)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)

    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    print("bench_agreement: TensorFlow %s, 2 processes on 127.0.0.1, model %d dense layers "
          "(%d variables) %dx%d batch %d, %d timed steps per variant (median)"
          % (tf.__version__, N_LAYERS, 2 * N_LAYERS, WIDTH, WIDTH, BATCH, args.steps),
          flush=True)
    header = "%-38s %15s %10s %10s %10s %7s" % (
        "backend", "collectives/step", "off ms", "on ms", "agree ms", "on/off")
    print(header)
    print("-" * len(header))
    for backend in [b for b in args.backends.split(",") if b]:
        reason = _unavailable(backend)
        if reason:
            print("%-38s unavailable: %s" % (LABELS.get(backend, backend), reason), flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix="bench_agreement_") as out:
            ranks, error = _launch(backend, args, out)
        if ranks is None:
            print("%-38s FAILED: %s" % (LABELS.get(backend, backend), " ".join(error)),
                  flush=True)
            continue
        off = statistics.median(t for r in ranks for t in r["times"]["off"]) * 1e3
        on = statistics.median(t for r in ranks for t in r["times"]["on"]) * 1e3
        counts = ranks[0]["collectives"]
        print("%-38s %15s %10.2f %10.2f %10.2f %7.2f" % (
            LABELS.get(backend, backend), "%d -> %d" % (counts["off"], counts["on"]),
            off, on, on - off, on / off), flush=True)
    print("off = is_distributed=False (no agreement); on = is_distributed=True.\n"
          "* strategy: 'off' is the plain inner optimizer under the same strategy (the strategy "
          "always agrees), so its difference also holds the loss-scaling work.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
