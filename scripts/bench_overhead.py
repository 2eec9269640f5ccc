"""Per-step cost of loss scaling, measured in one run against named baselines.

    python scripts/bench_overhead.py [--steps 200] [--layers 8] [--width 256]

Builds the same fp32 MLP (many variables, so per-gradient work shows) once per variant and times
`steps` training steps in a Session after a warm-up. Variants:

  plain            the inner optimizer alone (no loss scaling)           <- baseline A
  tf_dynamic       TensorFlow's MixedPrecisionLossScaleOptimizer, dynamic <- baseline B
  nls_inf_nan      NPULossScaleOptimizer, inf_nan backend
  nls_emulation    NPULossScaleOptimizer, emulation backend (register + MAX check)
  nls_fixed_nochk  NPULossScaleOptimizer, FixedLossScaleManager(enable_overflow_check=False)

Prints the median ms per step over the repeats (variants timed round robin) and the ratios to both baselines. The numbers depend
on the machine and its load: compare ratios from one run, not across runs.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402


def build(variant, layers, width, batch):
    x = tf.constant(np.random.RandomState(0).randn(batch, width).astype(np.float32))
    h = x
    for i in range(layers):
        w = tf.compat.v1.get_variable("w%d" % i, [width, width],
                                      initializer=tf.compat.v1.glorot_uniform_initializer())
        b = tf.compat.v1.get_variable("b%d" % i, [width], initializer=tf.zeros_initializer())
        h = tf.nn.relu(tf.matmul(h, w) + b)
    loss = tf.reduce_mean(tf.square(h))
    opt = tf.compat.v1.train.AdamOptimizer(1e-4)
    if variant == "tf_dynamic":
        opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(opt, "dynamic")
    elif variant == "nls_inf_nan":
        opt = nls.NPULossScaleOptimizer(
            opt, nls.ExponentialUpdateLossScaleManager(2 ** 15, 1000), backend="inf_nan")
    elif variant == "nls_emulation":
        opt = nls.NPULossScaleOptimizer(
            opt, nls.ExponentialUpdateLossScaleManager(2 ** 15, 1000), backend="emulation")
    elif variant == "nls_fixed_nochk":
        opt = nls.NPULossScaleOptimizer(
            opt, nls.FixedLossScaleManager(2 ** 15, enable_overflow_check=False))
    return opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())


def open_variant(variant, args):
    graph = tf.Graph()
    with graph.as_default():
        train = build(variant, args.layers, args.width, args.batch)
        init = tf.compat.v1.global_variables_initializer()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=2,
                                      inter_op_parallelism_threads=2)
    sess = tf.compat.v1.Session(graph=graph, config=config)
    sess.run(init)
    for _ in range(20):
        sess.run(train)
    return sess, train


def time_steps(sess, train, steps):
    start = time.perf_counter()
    for _ in range(steps):
        sess.run(train)
    return (time.perf_counter() - start) * 1000.0 / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    variants = ["plain", "tf_dynamic", "nls_inf_nan", "nls_emulation", "nls_fixed_nochk"]
    opened = {v: open_variant(v, args) for v in variants}
    # Round robin: every repeat times each variant once, so drifting machine load is shared.
    runs = {v: [] for v in variants}
    for _ in range(args.repeats):
        for v in variants:
            runs[v].append(time_steps(*opened[v], args.steps))
    results = {v: statistics.median(runs[v]) for v in variants}
    for sess, _ in opened.values():
        sess.close()
    print("TensorFlow %s, %d layers x %d, batch %d, %d steps x %d repeats (median)"
          % (tf.__version__, args.layers, args.width, args.batch, args.steps, args.repeats))
    print("%-16s %10s %12s %16s" % ("variant", "ms/step", "vs plain", "vs tf_dynamic"))
    for v in variants:
        print("%-16s %10.3f %11.3fx %15.3fx" % (v, results[v], results[v] / results["plain"],
                                                results[v] / results["tf_dynamic"]))


if __name__ == "__main__":
    main()
