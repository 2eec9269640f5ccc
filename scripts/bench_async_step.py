"""Eager step time with and without the GradScaler's optimizer thread, measured in one run.

    python scripts/bench_async_step.py [--steps 30] [--repeats 3] [--layers 4] [--width 1024]
                                       [--intra-op-threads N]

The model is an fp32 MLP with wide layers and a small batch, trained with Adam: the update
(several element-wise ops over every parameter) is a large part of each step. Variants, timed
round robin in one process:

  sync    scaler.scale / tape.gradient / scaler.step / scaler.update on the main thread  <- baseline
  async   the same, with scaler.step submitted to an OptimizerThread (the main thread goes on
          with the next forward/backward while the update is applied); the clock stops after
          the optimizer thread has drained

Prints the median ms per step of each variant and the ratio async / sync. Numbers depend on the
machine and its load (the overlap needs a free core): compare ratios from one run.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402


def make_model(layers, width):
    rng = np.random.RandomState(0)
    return [tf.Variable((rng.randn(width, width) / np.sqrt(width)).astype(np.float32),
                        name="w%d" % i) for i in range(layers)]


def forward_backward(scaler, weights, x):
    with tf.GradientTape() as tape:
        h = x
        for w in weights:
            h = tf.nn.relu(tf.matmul(h, w))
        loss = scaler.scale(tf.reduce_mean(tf.square(h)))
    return tape.gradient(loss, weights)


def run(variant, steps, layers, width, batch):
    weights = make_model(layers, width)
    opt = tf.keras.optimizers.Adam(1e-4)
    scaler = nls.GradScaler(init_scale=2.0 ** 10)
    x = tf.constant(np.random.RandomState(1).randn(batch, width).astype(np.float32))
    grads = forward_backward(scaler, weights, x)       # warm-up: builds the optimizer
    scaler.step(opt, list(zip(grads, weights)))
    scaler.update()
    if variant == "sync":
        start = time.perf_counter()
        for _ in range(steps):
            grads = forward_backward(scaler, weights, x)
            scaler.step(opt, list(zip(grads, weights)))
            scaler.update()
        return (time.perf_counter() - start) / steps
    with nls.OptimizerThread(scaler) as worker:
        start = time.perf_counter()
        for _ in range(steps):
            grads = forward_backward(scaler, weights, x)
            pairs = list(zip(grads, weights))
            worker.submit(lambda p=pairs: scaler.step(opt, p))
            scaler.update()
        worker.synchronize()
        return (time.perf_counter() - start) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--intra-op-threads", type=int, default=0,
                        help="TensorFlow intra-op threads (0 = TensorFlow's default); with 1, "
                             "each thread's ops use one core and the two threads can overlap")
    args = parser.parse_args()
    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    times = {"sync": [], "async": []}
    for _ in range(args.repeats):
        for variant in times:
            times[variant].append(run(variant, args.steps, args.layers, args.width, args.batch))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print("model: %d x (%d x %d) fp32, batch %d, Adam; %d steps x %d repeats; intra-op threads "
          "%s; TF %s" % (args.layers, args.width, args.width, args.batch, args.steps,
                         args.repeats, args.intra_op_threads or "default", tf.__version__))
    for variant in times:
        print("  %-6s %8.2f ms/step" % (variant, med[variant]))
    print("  ratio async / sync = %.3f" % (med["async"] / med["sync"]))


if __name__ == "__main__":
    main()
