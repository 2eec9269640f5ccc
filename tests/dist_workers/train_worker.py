"""One rank of a small distributed training run; writes what it saw after every step.

Started by the distributed tests (never imported by them), either by ``horovodrun`` or once per
task of a TF cluster::

    horovodrun -np 2 -H localhost:2 --gloo python train_worker.py --launcher horovod --out DIR
    TF_CONFIG=... python train_worker.py --launcher collective --out DIR

Every rank trains the same tiny fp16 model (``saturate`` marks where the device would saturate)
for ``--steps`` steps. Rank ``--overflow-rank`` feeds inputs a million times larger at the
``--overflow-steps``, so only its forward pass saturates and only its (emulated) float-status
register is set. It runs one or more *configurations* one after the other, each in a fresh
graph and session:

``agree``      ``is_distributed=True``, agreement discovered; all ranks see the same data.
``alone``      ``is_distributed=False``; same data (the run that must show the divergence).
``agree_avg``  Horovod only: ``hvd.DistributedOptimizer`` inside the loss-scale optimizer
               (averaging inside, loss scaling outside), ``is_distributed=True``; data differs
               per rank.
``alone_avg``  as ``agree_avg`` with ``is_distributed=False``.
``strategy``   TF collectives only: ``MultiWorkerMirroredStrategy`` (graph mode) averages the
               gradients and agrees on the status; data differs per rank.

Output: ``<out>/rank<R>.json`` = ``{config: {"steps": [record, ...], "warned": bool}}``; a
record holds the step's ``finite`` flag and, after the step, loss scale, good/bad/skipped
counters, ``global_step`` and the variables. A failed step writes ``<out>/rank<R>.error.json``
and exits with status 3.
"""
import argparse
import json
import os
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402
from npu_loss_scale import agreement  # noqa: E402
from npu_loss_scale.tools import graph_checks  # noqa: E402

BATCH, DIN, DOUT = 4, 3, 2
ERROR_EXIT = 3
DIE_EXIT = 17


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--launcher", choices=("horovod", "collective"), required=True)
    p.add_argument("--configs", default="agree,alone")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--overflow-rank", type=int, default=1)
    p.add_argument("--overflow-steps", default="2,5")
    p.add_argument("--timeout", type=float, default=None,
                   help="agreement timeout in seconds (collective op timeout / Horovod timeouts)")
    p.add_argument("--operation-timeout-ms", type=int, default=0,
                   help="strategy config: ConfigProto.operation_timeout_in_ms of the session")
    p.add_argument("--die-rank", type=int, default=None,
                   help="this rank exits abruptly before step --die-step of the first config")
    p.add_argument("--die-step", type=int, default=3)
    p.add_argument("--no-join-rank", type=int, default=None,
                   help="this rank never joins: it sleeps --no-join-sleep seconds and exits 0")
    p.add_argument("--no-join-sleep", type=float, default=120.0)
    return p.parse_args(argv)


def manager():
    return nls.ExponentialUpdateLossScaleManager(init_loss_scale=1024, incr_every_n_steps=3,
                                                 decr_every_n_nan_or_inf=1, decr_ratio=0.5)


def batch(step, rank, per_rank_data, args):
    seed = 1000 + step + (100 * rank if per_rank_data else 0)
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1.0, 1.0, (BATCH, DIN)).astype(np.float32)
    target = rng.uniform(-1.0, 1.0, (BATCH, DOUT)).astype(np.float32)
    overflow_steps = {int(s) for s in args.overflow_steps.split(",") if s}
    if rank == args.overflow_rank and step in overflow_steps:
        x = x * np.float32(1e6)   # the fp16 activation saturates: only this rank's register is set
    return x, target


def model_loss(x, target):
    w = tf.compat.v1.get_variable(
        "w", initializer=np.linspace(-0.5, 0.5, DIN * DOUT).reshape(DIN, DOUT).astype(np.float32),
        use_resource=True)
    b = tf.compat.v1.get_variable("b", initializer=np.zeros([DOUT], np.float32),
                                  use_resource=True)
    y16 = nls.saturate(tf.cast(tf.matmul(x, w) + b, tf.float16))
    loss = tf.reduce_mean(tf.square(tf.cast(y16, tf.float32) - target))
    return loss, [w, b]


class Run:
    """The graph of one configuration: train op, status flag and the state to record."""

    def __init__(self, config, rank, hvd=None):
        self.config = config
        self.graph = tf.Graph()
        self.strategy = None
        per_rank_data = config in ("agree_avg", "alone_avg", "strategy")
        self.per_rank_data = per_rank_data
        is_distributed = config in ("agree", "agree_avg", "strategy")
        with self.graph.as_default(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.x = tf.compat.v1.placeholder(tf.float32, [BATCH, DIN], name="x")
            self.t = tf.compat.v1.placeholder(tf.float32, [BATCH, DOUT], name="t")
            if config == "strategy":
                # Built inside the graph: in graph mode the strategy uses this process's
                # tf.distribute.Server instead of configuring eager collectives.
                self.strategy = tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy()
                with self.strategy.scope():
                    self._build_in_strategy(self.strategy, is_distributed)
            else:
                self.mgr = manager()
                inner = tf.compat.v1.train.GradientDescentOptimizer(0.05)
                if config.endswith("_avg"):
                    inner = hvd.DistributedOptimizer(inner)
                self.opt = nls.NPULossScaleOptimizer(inner, self.mgr,
                                                     is_distributed=is_distributed)
                loss, self.vars = model_loss(self.x, self.t)
                self.gs = tf.compat.v1.train.get_or_create_global_step()
                self.train = self.opt.minimize(loss, global_step=self.gs)
                self.finite = self.opt.overflow_status_reduce_all
                scale, good, bad = self.mgr.variables
                self.state = {"loss_scale": tf.identity(scale), "good_steps": tf.identity(good),
                              "bad_steps": tf.identity(bad),
                              "skipped_steps": tf.identity(self.opt.skipped_steps),
                              "global_step": tf.identity(self.gs),
                              "w": tf.identity(self.vars[0]), "b": tf.identity(self.vars[1])}
            self.init = tf.compat.v1.global_variables_initializer()
            self.collectives = graph_checks.count_collectives(self.train)
        self.warned = any(issubclass(w.category, agreement.RanksMayDivergeWarning)
                          for w in caught)

    def _build_in_strategy(self, strategy, is_distributed):
        self.mgr = manager()
        self.opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.05),
                                             self.mgr, is_distributed=is_distributed)
        self.gs = tf.compat.v1.train.get_or_create_global_step()
        holder = {}

        def step_fn(x, t):
            loss, holder["vars"] = model_loss(x, t)
            return self.opt.minimize(loss, global_step=self.gs)

        per_replica = strategy.extended.call_for_each_replica(step_fn, args=(self.x, self.t))
        self.train = strategy.group(per_replica)
        self.finite = self.opt.overflow_status_reduce_all
        self.vars = holder["vars"]
        scale, good, bad = self.mgr.variables
        read = tf.convert_to_tensor
        self.state = {"loss_scale": read(scale), "good_steps": read(good), "bad_steps": read(bad),
                      "skipped_steps": read(self.opt.skipped_steps),
                      "global_step": read(self.gs), "w": read(self.vars[0]),
                      "b": read(self.vars[1])}

    def run(self, sess, rank, args, die=False):
        sess.run(self.init)
        records = []
        for step in range(args.steps):
            if die and step == args.die_step:
                sys.stdout.flush()
                os._exit(DIE_EXIT)  # pylint: disable=protected-access
            x, t = batch(step, rank, self.per_rank_data, args)
            started = time.time()
            try:
                _, finite = sess.run([self.train, self.finite], {self.x: x, self.t: t})
            except tf.errors.OpError as err:
                return records, {"config": self.config, "step": step,
                                 "type": type(err).__name__, "message": err.message,
                                 "seconds": time.time() - started}
            state = sess.run(self.state)
            rec = {"step": step, "finite": bool(finite)}
            for key, value in state.items():
                value = np.asarray(value)
                rec[key] = value.tolist() if value.ndim else value.item()
            records.append(rec)
        return records, None


def write_json(path, payload):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def write_pid_file(rank):
    """Lets the launcher kill this process by pid if the run outlives its deadline."""
    path = os.environ.get("NLS_PID_FILE")
    if not path and os.environ.get("NLS_PID_DIR"):
        path = os.path.join(os.environ["NLS_PID_DIR"], "pid.%s" % rank)
    if path:
        with open(path, "w") as f:
            f.write(str(os.getpid()))


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    write_pid_file(os.environ.get("HOROVOD_RANK", "task"))
    configs = [c for c in args.configs.split(",") if c]
    hvd = None
    cluster = None
    if args.launcher == "horovod":
        rank = int(os.environ.get("HOROVOD_RANK", "0"))
        if rank == args.no_join_rank:
            time.sleep(args.no_join_sleep)
            return 0
        import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
        agreement.configure_horovod_timeouts(args.timeout)
        hvd.init()
        rank = hvd.rank()
        session_config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                                  inter_op_parallelism_threads=2)
        target = ""
    else:
        cluster = agreement.configure_collective(timeout=args.timeout)   # from TF_CONFIG
        rank = cluster.rank
        base = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                        inter_op_parallelism_threads=2)
        server = cluster.start_server(base)
        session_config = cluster.session_config(base)
        target = server.target

    results = {}
    out_path = os.path.join(args.out, "rank%d.json" % rank)
    for index, config in enumerate(configs):
        run = Run(config, rank, hvd=hvd)
        config_proto = session_config
        if run.strategy is not None:
            # The strategy's all-reduces have no timeout of their own in graph mode: bound
            # every session.run instead.
            config_proto = run.strategy.update_config_proto(session_config)
            config_proto.operation_timeout_in_ms = args.operation_timeout_ms
        with tf.compat.v1.Session(target, graph=run.graph, config=config_proto) as sess:
            die = index == 0 and rank == args.die_rank
            records, error = run.run(sess, rank, args, die=die)
        results[config] = {"steps": records, "warned": run.warned,
                           "collectives": run.collectives}
        write_json(out_path, results)
        if error is not None:
            write_json(os.path.join(args.out, "rank%d.error.json" % rank), error)
            print("NLS_WORKER rank %d: %s at step %d of config %r: %s"
                  % (rank, error["type"], error["step"], config, error["message"].strip()),
                  file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(ERROR_EXIT)  # pylint: disable=protected-access
    print("NLS_WORKER rank %d: done %s" % (rank, ",".join(configs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
