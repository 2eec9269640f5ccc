"""Long-run load: memory, step time and graph size stay flat over 100,000 loss-scaled steps.

A tiny model (two float16 layers, saturated like the device) trains through
``NPULossScaleOptimizer`` with a dynamic ``ExponentialUpdateLossScaleManager`` on the emulation
backend; every 97th step a forward overflow is injected (saturated to 65504: only the register
sees it) and every 1,009th step an inf, so the loss scale keeps moving down and up. The graph is
finalized before the first step (adding an op would raise); its op count is printed at the
start and the end. For each window of steps it prints the resident set size (``VmRSS``), the
mean time per step, and the skipped steps; then a verdict: the least-squares slope of RSS and of
step time over the windows after the first (warm-up), and the change from the second window to
the last.

    python scripts/bench_load.py                      # 100,000 graph steps, 10 windows
    python scripts/bench_load.py --function-steps 20000   # plus the tf.function variant

The ``tf.function`` variant runs the same model eagerly through one traced step function and
prints how many times it was traced (a retrace per step would show as growth in both).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402


def rss_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


def boost_for(step):
    if step % 1009 == 1008:
        return float("inf")
    if step % 97 == 96:
        return 1e6
    return 1.0


def model_loss(w1, w2, x, boost):
    h = nls.saturate(tf.matmul(tf.cast(x, tf.float16), tf.cast(w1, tf.float16))
                     * tf.cast(boost, tf.float16))
    h = tf.nn.relu(h)
    y = nls.saturate(tf.matmul(h, tf.cast(w2, tf.float16)))
    return tf.reduce_mean(tf.square(tf.cast(y, tf.float32)))


def make_manager():
    return nls.ExponentialUpdateLossScaleManager(2.0 ** 15, incr_every_n_steps=30,
                                                 decr_every_n_nan_or_inf=1, decr_ratio=0.5)


def slope(xs, ys):
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if len(xs) < 2:
        return 0.0
    return float(np.polyfit(xs, ys, 1)[0])


def report(title, rows, per):
    print(title)
    print("  %8s %10s %10s %12s %8s" % ("window", "end step", "RSS MB", "ms/step", "skipped"))
    for i, (end, rss, ms, skipped) in enumerate(rows):
        print("  %8d %10d %10.1f %12.3f %8d" % (i + 1, end, rss, ms, skipped))
    steady = rows[1:] if len(rows) > 2 else rows
    ends = [r[0] for r in steady]
    rss_slope = slope(ends, [r[1] for r in steady]) * per
    ms_slope = slope(ends, [r[2] for r in steady]) * per
    first, last = steady[0], steady[-1]
    print("  verdict: RSS slope %+.2f MB per %d steps (window 2 -> last: %+.1f MB, %+.1f %%); "
          "step-time slope %+.4f ms per %d steps (window 2 -> last: %+.1f %%)"
          % (rss_slope, per, last[1] - first[1], 100.0 * (last[1] - first[1]) / first[1],
             ms_slope, per, 100.0 * (last[2] - first[2]) / first[2]))
    return rss_slope, ms_slope


def run_graph(steps, windows, width):
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x_value = rng.normal(0, 1, [8, width]).astype(np.float32)
        x = tf.constant(x_value)
        boost = tf.compat.v1.placeholder_with_default(tf.constant(1.0), [])
        w1 = tf.compat.v1.get_variable("w1", initializer=rng.normal(0, 0.3, [width, width])
                                       .astype(np.float32))
        w2 = tf.compat.v1.get_variable("w2", initializer=rng.normal(0, 0.3, [width, 1])
                                       .astype(np.float32))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.MomentumOptimizer(1e-3, 0.9),
                                        make_manager(), backend="emulation")
        train = opt.minimize(model_loss(w1, w2, x, boost), global_step=global_step)
        fetch = {"train": train, "skipped": opt.skipped_steps, "scale": opt.loss_scale}
        init = tf.compat.v1.global_variables_initializer()
    graph.finalize()
    ops_start = len(graph.get_operations())
    per_window = steps // windows
    rows, scales = [], set()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(fetch)                       # first run: kernels, allocations
        step = 1
        for _ in range(windows):
            start = time.perf_counter()
            for _ in range(per_window):
                b = boost_for(step)
                out = sess.run(fetch, {boost: b} if b != 1.0 else None)
                scales.add(float(out["scale"]))
                step += 1
            ms = (time.perf_counter() - start) * 1000.0 / per_window
            rows.append((step, rss_mb(), ms, int(out["skipped"])))
        final_scale = float(out["scale"])
        gs = int(sess.run(global_step))
    ops_end = len(graph.get_operations())
    print("graph mode: %d steps (%d applied, %d skipped), loss scale between %g and %g, final "
          "%g; graph ops at start %d, at end %d (finalized: no op can be added)"
          % (step, gs, rows[-1][3], min(scales), max(scales), final_scale, ops_start, ops_end))
    report("graph mode, %d windows of %d steps" % (windows, per_window), rows, per_window)
    return ops_start, ops_end


def run_function(steps, windows, width):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(0, 1, [8, width]).astype(np.float32))
    w1 = tf.Variable(rng.normal(0, 0.3, [width, width]).astype(np.float32))
    w2 = tf.Variable(rng.normal(0, 0.3, [width, 1]).astype(np.float32))
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.MomentumOptimizer(1e-3, 0.9),
                                    make_manager(), backend="emulation")

    @tf.function
    def step_fn(boost):
        opt.minimize(lambda: model_loss(w1, w2, x, boost), var_list=[w1, w2],
                     global_step=global_step)

    step_fn(tf.constant(1.0))
    per_window = steps // windows
    rows, step = [], 1
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(per_window):
            step_fn(tf.constant(boost_for(step)))
            step += 1
        ms = (time.perf_counter() - start) * 1000.0 / per_window
        rows.append((step, rss_mb(), ms, int(opt.skipped_steps.numpy())))
    traces = step_fn.experimental_get_tracing_count()
    print("tf.function: %d steps (%d applied, %d skipped), final loss scale %g; traced %d time(s)"
          % (step, int(global_step.numpy()), rows[-1][3], float(opt.loss_scale.numpy()), traces))
    report("tf.function, %d windows of %d steps" % (windows, per_window), rows, per_window)
    return traces


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100000, help="graph-mode steps")
    parser.add_argument("--windows", type=int, default=10)
    parser.add_argument("--function-steps", type=int, default=0,
                        help="steps of the tf.function variant (0: skip it)")
    parser.add_argument("--width", type=int, default=16)
    args = parser.parse_args(argv)
    if args.steps < args.windows or args.windows < 1:
        parser.error("--steps must be >= --windows >= 1; got --steps %d --windows %d"
                     % (args.steps, args.windows))
    print("TensorFlow %s, backend emulation, tiny model width %d" % (tf.__version__, args.width))
    ops_start, ops_end = run_graph(args.steps, args.windows, args.width)
    if args.function_steps:
        run_function(args.function_steps, args.windows, args.width)
    return 0 if ops_start == ops_end else 1


if __name__ == "__main__":
    sys.exit(main())
