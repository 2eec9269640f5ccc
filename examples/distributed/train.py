"""Data-parallel training with Ascend loss scaling in which every rank skips the same steps.

Horovod (Gloo, 2 processes on this machine)::

    horovodrun -np 2 -H localhost:2 --gloo python examples/distributed/train.py

TensorFlow only (starts 2 worker processes itself, MultiWorkerMirroredStrategy in graph mode)::

    python examples/distributed/train.py --workers 2

A small fp16 classifier on synthetic data; activations pass through ``npu_loss_scale.saturate``,
which behaves like an Atlas training device in saturation mode (overflow -> +-65504 and a flag in
the float-status register, nothing visible in the tensors). At ``--overflow-step`` rank 1 gets
a corrupted batch: only its own register is set. Because the optimizer is built with
``is_distributed=True``, the status is summed over the ranks and *every* rank skips that step;
at the end each rank prints a fingerprint of its variables, loss scale and global step, and
the run fails if they differ. Try ``--no-agreement`` to see rank 0 apply the step rank 1 skipped.

The order of wrapping (see docs/distributed.md)::

    opt = tf.compat.v1.train.MomentumOptimizer(lr, 0.9)
    opt = hvd.DistributedOptimizer(opt)                              # averaging: inside
    opt = nls.NPULossScaleOptimizer(opt, manager, is_distributed=True)  # scaling + agreement: outside
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402
from npu_loss_scale import agreement  # noqa: E402

FEATURES, CLASSES, HIDDEN, BATCH = 16, 4, 32, 64


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--overflow-step", type=int, default=10,
                   help="step at which rank 1 gets a batch that overflows in fp16")
    p.add_argument("--no-agreement", action="store_true",
                   help="build the optimizer with is_distributed=False (ranks diverge)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds the ranks wait for a missing rank before failing")
    p.add_argument("--workers", type=int, default=0,
                   help="TF-only mode: start this many worker processes on 127.0.0.1")
    p.add_argument("--task", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args()


def synthetic_batch(step, rank, overflow_step):
    """Linearly separable 4-class data, different on every rank and step."""
    rng = np.random.RandomState(10000 * rank + step)
    labels = rng.randint(0, CLASSES, BATCH)
    centers = np.eye(CLASSES, FEATURES, dtype=np.float32) * 3.0
    x = centers[labels] + rng.normal(0, 1, (BATCH, FEATURES)).astype(np.float32)
    if rank == 1 and step == overflow_step:
        x *= 1e6   # a corrupted batch: its fp16 activations overflow on this rank only
    return x, labels.astype(np.int32)


def build_model(x, labels):
    init = tf.compat.v1.glorot_uniform_initializer(seed=1)
    w1 = tf.compat.v1.get_variable("w1", [FEATURES, HIDDEN], initializer=init)
    w2 = tf.compat.v1.get_variable("w2", [HIDDEN, CLASSES], initializer=init)
    # saturate() wherever an fp16 value is produced, forward and backward, as the device would
    sat16 = lambda t: nls.saturate(tf.cast(t, tf.float16))  # noqa: E731
    h = nls.saturate(tf.nn.relu(tf.matmul(sat16(x), sat16(w1))))
    logits = nls.saturate(tf.matmul(h, sat16(w2)))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32)))


def manager():
    # Ascend BERT-style dynamic scaling, with a short growth interval for the demo.
    return nls.ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 15, incr_every_n_steps=20,
                                                 decr_every_n_nan_or_inf=1, decr_ratio=0.5)


def fingerprint(sess, variables, extra):
    values = [np.asarray(v, np.float64).ravel() for v in sess.run(variables + extra)]
    weights = np.concatenate(values[:len(variables)])
    return [float(weights.sum()), [float(v[0]) for v in values[len(variables):]]]


def report(rank, step, loss, finite, scale, skipped):
    if rank == 0:
        print("step %3d  loss %.4f  %s  loss scale %g  skipped %d"
              % (step, loss, "applied" if finite else "SKIPPED (overflow)", scale, skipped),
              flush=True)


# -- Horovod -------------------------------------------------------------------------------------
def run_horovod(args):
    import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
    agreement.configure_horovod_timeouts(args.timeout)   # before hvd.init()
    hvd.init()
    rank = hvd.rank()
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [BATCH, FEATURES])
        labels = tf.compat.v1.placeholder(tf.int32, [BATCH])
        loss = build_model(x, labels)
        mgr = manager()
        opt = tf.compat.v1.train.MomentumOptimizer(0.05 * hvd.size(), 0.9)
        opt = hvd.DistributedOptimizer(opt)                             # averaging inside
        opt = nls.NPULossScaleOptimizer(opt, mgr, is_distributed=not args.no_agreement)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        finite = opt.overflow_status_reduce_all
        init = tf.compat.v1.global_variables_initializer()
        bcast = hvd.broadcast_global_variables(0)
        variables = tf.compat.v1.trainable_variables()
        extra = [mgr.get_loss_scale(), tf.cast(gs, tf.float32)]
        mine = tf.compat.v1.placeholder(tf.float64, [3])
        everyone = hvd.allgather(tf.reshape(mine, [1, 3]))
        with tf.compat.v1.Session() as sess:
            sess.run(init)
            sess.run(bcast)
            for step in range(args.steps):
                xb, yb = synthetic_batch(step, rank, args.overflow_step)
                _, l, f = sess.run([train, loss, finite], {x: xb, labels: yb})
                report(rank, step, l, f, *sess.run([mgr.get_loss_scale(), opt.skipped_steps]))
            total, (scale, step_count) = fingerprint(sess, variables, extra)
            print("rank %d: variables sum %.9g, loss scale %g, global_step %d"
                  % (rank, total, scale, step_count), flush=True)
            gathered = sess.run(everyone, {mine: [total, scale, step_count]})
    return finish(rank, hvd.size(), gathered)


def finish(rank, size, gathered):
    same = bool(np.all(gathered == gathered[0]))
    if rank == 0:
        print("identical on all %d ranks: %s" % (size, "yes" if same else "NO - ranks diverged"),
              flush=True)
    return 0 if same else 1


# -- TF only: MultiWorkerMirroredStrategy in graph mode ---------------------------------------------
def run_worker(args):
    cluster = agreement.CollectiveCluster.from_tf_config(timeout=args.timeout)
    rank = cluster.rank
    server = cluster.start_server()
    with tf.Graph().as_default():
        strategy = tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy()
        config = strategy.update_config_proto(cluster.session_config())
        x = tf.compat.v1.placeholder(tf.float32, [BATCH, FEATURES])
        labels = tf.compat.v1.placeholder(tf.int32, [BATCH])
        with strategy.scope():
            mgr = manager()
            opt = nls.NPULossScaleOptimizer(
                tf.compat.v1.train.MomentumOptimizer(0.05 * cluster.group_size, 0.9), mgr,
                is_distributed=not args.no_agreement)   # the strategy averages and agrees
            gs = tf.compat.v1.train.get_or_create_global_step()
            holder = {}

            def step_fn(xx, yy):
                holder["loss"] = build_model(xx, yy)
                return opt.minimize(holder["loss"], global_step=gs)

            train = strategy.group(strategy.extended.call_for_each_replica(step_fn,
                                                                           args=(x, labels)))
            init = tf.compat.v1.global_variables_initializer()
        finite = opt.overflow_status_reduce_all
        variables = [tf.convert_to_tensor(v) for v in tf.compat.v1.trainable_variables()]
        extra = [tf.convert_to_tensor(mgr.get_loss_scale()),
                 tf.cast(tf.convert_to_tensor(gs), tf.float32)]
        with tf.compat.v1.Session(server.target, config=config) as sess:
            sess.run(init)
            for step in range(args.steps):
                xb, yb = synthetic_batch(step, rank, args.overflow_step)
                _, l, f = sess.run([train, holder["loss"], finite], {x: xb, labels: yb})
                report(rank, step, l, f, *sess.run(
                    [extra[0], tf.convert_to_tensor(opt.skipped_steps)]))
            total, (scale, step_count) = fingerprint(sess, variables, extra)
    print("rank %d: variables sum %.9g, loss scale %g, global_step %d"
          % (rank, total, scale, step_count), flush=True)
    print("FINGERPRINT " + json.dumps([total, scale, step_count]), flush=True)
    sys.stdout.flush()
    os._exit(0)  # pylint: disable=protected-access


def launch_workers(args):
    """Starts ``--workers`` processes on 127.0.0.1 with TF_CONFIG, relays rank 0's output,
    and compares the fingerprints. Every worker is bounded by the agreement timeout; the
    launcher kills any that outlive a hard deadline."""
    socks = [socket.socket() for _ in range(args.workers)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    hosts = ["127.0.0.1:%d" % s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    procs = []
    for index in range(args.workers):
        env = dict(os.environ, TF_CONFIG=json.dumps({
            "cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}))
        cmd = [sys.executable, os.path.abspath(__file__), "--task", str(index)]
        cmd += [a for a in sys.argv[1:]]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    deadline = time.time() + 120 + 2 * args.timeout
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            print("workers outlived the deadline and were killed", file=sys.stderr)
            return 2
        outputs.append(out)
    prints = []
    for rank, out in enumerate(outputs):
        for line in out.splitlines():
            if line.startswith("FINGERPRINT "):
                prints.append(json.loads(line[len("FINGERPRINT "):]))
            elif rank == 0 or line.startswith("rank "):
                print(line)
    if any(p.returncode != 0 for p in procs) or len(prints) != args.workers:
        print("a worker failed: exit codes %s" % [p.returncode for p in procs], file=sys.stderr)
        return 1
    gathered = np.array(prints)
    return finish(0, args.workers, gathered)


def main():
    args = parse_args()
    if args.task is not None:
        return run_worker(args)
    if args.workers:
        return launch_workers(args)
    if "HOROVOD_RANK" not in os.environ:
        print("Start this example with horovodrun (see the docstring), or pass --workers 2.",
              file=sys.stderr)
        return 2
    return run_horovod(args)


if __name__ == "__main__":
    sys.exit(main())
