"""Cost of overflow localisation, measured in one run against the same model without it.

    python scripts/bench_localisation.py [--steps 50] [--repeats 5] [--layers 6] [--width 256]

Builds one float16 MLP (``--layers`` dense layers of ``--width``, every float16 op saturated by
``saturate_every_op``, trained through ``NPULossScaleOptimizer`` with the emulation backend)
three times, each in its own graph:

  off        localisation off                                        <- the baseline
  overflow   localisation on: every saturation site notes its magnitude when it overflows,
             the step's sites are read out at the register read
  observe    the advisor's observation mode: every site notes its magnitude on every step

Off adds nothing to the graph (the op counts are printed too). The variants are timed round
robin in a shuffled order each round, ``steps`` steps per repeat after a warm-up; the best and
the median ms per step and their ratios to ``off`` are printed (on a busy machine the best of
many short repeats is the steadier figure). Compare ratios from one run, not across runs or
machines.
"""
import argparse
import os
import random
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402
from npu_loss_scale.device import localisation
from npu_loss_scale.device import saturation  # noqa: E402

VARIANTS = (localisation.OFF, localisation.OVERFLOW, localisation.OBSERVE)


def build(mode, layers, width, batch):
    graph = tf.Graph()
    with graph.as_default(), localisation.localising(mode):
        with saturation.saturate_every_op():
            x = tf.compat.v1.placeholder(tf.float16, [batch, width], name="x")
            h = x
            for i in range(layers):
                w = tf.compat.v1.get_variable("w%d" % i, [width, width], tf.float32,
                                              tf.compat.v1.glorot_uniform_initializer(seed=i))
                h = tf.nn.relu(tf.matmul(h, tf.cast(w, tf.float16)))
            loss = tf.reduce_mean(tf.square(tf.cast(h, tf.float32)))
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1e-3),
                                            nls.FixedLossScaleManager(1024.0))
            train = opt.minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session(graph=graph)
    sess.run(init)
    return sess, train, x, len(graph.get_operations())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    feed_value = np.random.RandomState(0).randn(args.batch, args.width).astype(np.float16)
    runs = {}
    for mode in VARIANTS:
        sess, train, x, ops = build(mode, args.layers, args.width, args.batch)
        for _ in range(5):
            sess.run(train, {x: feed_value})
        runs[mode] = (sess, train, x, ops, [])
    order = list(VARIANTS)
    shuffle = random.Random(0).shuffle
    for _ in range(args.repeats):
        shuffle(order)
        for mode in order:
            sess, train, x, _, times = runs[mode]
            start = time.perf_counter()
            for _ in range(args.steps):
                sess.run(train, {x: feed_value})
            times.append((time.perf_counter() - start) * 1000.0 / args.steps)
    best_off = min(runs[localisation.OFF][4])
    median_off = statistics.median(runs[localisation.OFF][4])
    print("float16 MLP: %d layers of %d, batch %d, %d steps x %d repeats; emulation backend, "
          "saturate_every_op" % (args.layers, args.width, args.batch, args.steps, args.repeats))
    print("%-10s %10s %12s %8s %14s %8s" % ("variant", "graph ops", "best ms/step", "vs off",
                                            "median ms/step", "vs off"))
    for mode in VARIANTS:
        _, _, _, ops, times = runs[mode]
        best, median = min(times), statistics.median(times)
        print("%-10s %10d %12.3f %7.2fx %14.3f %7.2fx" % (mode, ops, best, best / best_off,
                                                         median, median / median_off))
    for sess, *_ in runs.values():
        sess.close()


if __name__ == "__main__":
    main()
