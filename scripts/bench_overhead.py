"""Per-step cost of loss scaling, measured in one run against named baselines.

    python scripts/bench_overhead.py [--steps 200] [--layers 8] [--width 256]
    python scripts/bench_overhead.py --bert [--steps 2] [--repeats 30]

Builds the same fp32 MLP (many variables, so per-gradient work shows) once per variant and times
`steps` training steps in a Session after a warm-up. Variants:

  plain            the inner optimizer alone (no loss scaling)           <- baseline A
  tf_dynamic       TensorFlow's MixedPrecisionLossScaleOptimizer, dynamic <- baseline B
  nls_inf_nan      NPULossScaleOptimizer, inf_nan backend
  nls_emulation    NPULossScaleOptimizer, emulation backend (register + inf/NaN check)
  nls_fixed_nochk  NPULossScaleOptimizer, FixedLossScaleManager(enable_overflow_check=False)

Prints the median ms per step over the repeats (variants timed round robin) and the ratios to
both baselines. The numbers depend on the machine and its load: compare ratios from one run, not
across runs.

``--bert``: the BERT-base-shaped case. About 110 M float32 parameters in 199 tensors (the
tensors of BERT-base: embeddings, 12 layers, pooler) with *fixed* gradients: the loss is
``sum(stop_gradient(G_i) * w_i)``, so backpropagation is one multiply per tensor and every
variant does the same work apart from loss scaling. The inner optimizer is SGD with learning
rate 0 (the variables never change, so every variant shares them in one graph); the loss is
multiplied by a variable holding 1, so plain's backpropagation does the same multiplies as that of
the loss-scaled variants (Grappler would drop a multiply by the constant 1). Variants:

  plain            SGD alone                                             <- baseline A
  read_pass        plain + one read pass over the gradients (add_n of per-tensor reduce_sum)
  tf_dynamic       TensorFlow's MixedPrecisionLossScaleOptimizer, dynamic <- baseline B
  nls_inf_nan      NPULossScaleOptimizer, inf_nan backend
  nls_emulation    NPULossScaleOptimizer, emulation backend
                   (both with the fused unscale-and-check kernel of npu_loss_scale._internal.kernels
                   when it builds: the run says whether it did)
  nls_inf_nan_2p   the same, built with NPU_LOSS_SCALE_FUSED_UNSCALE=off: the check (one sum
  nls_emulation_2p per tensor) and the unscaling multiply as two passes
  unscale_only     NPULossScaleOptimizer with FixedLossScaleManager(enable_overflow_check=False):
                   the unscaling multiply alone, no check and no conditional apply. Every
                   loss-scale optimizer pays it (TensorFlow's included), so its ratio to
                   TensorFlow's overhead is the floor of any implementation that unscales the
                   gradients before the inner optimizer sees them.

Each of ``--repeats`` rounds times ``--steps`` steps of every variant (the order rotated round by
round). It prints the kernels one traced step of each variant runs (so nothing is folded away:
``read_pass`` runs one Sum per gradient), then, for wall-clock time and for the CPU time of the
process, each variant's ms/step and overhead over plain (median and quartiles over the rounds),
the overhead in read passes, and the overhead as a fraction of TensorFlow's with a bootstrap
5-95 % range. It takes a few minutes (2 cores; longer on a loaded machine).
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402
from npu_loss_scale._internal import kernels as _kernels  # noqa: E402


def tf_loss_scale_optimizer(opt):
    """Baseline B: TensorFlow's own dynamic loss-scale optimizer for a tf.compat.v1 optimizer
    (tf.compat.v1.mixed_precision on 2.x; the same class under tf.train.experimental on 1.15)."""
    mixed_precision = getattr(tf.compat.v1, "mixed_precision", None)
    cls = getattr(mixed_precision, "MixedPrecisionLossScaleOptimizer", None) or \
        tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer
    return cls(opt, "dynamic")

FUSED_ENV = _kernels.ENV_MODE


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
        opt = tf_loss_scale_optimizer(opt)
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
    return time_steps_both(sess, train, steps)[0]


def time_steps_both(sess, train, steps):
    """(wall-clock ms per step, CPU ms per step of this process, all its threads)."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        sess.run(train)
    return ((time.perf_counter() - start) * 1000.0 / steps,
            (time.process_time() - cpu) * 1000.0 / steps)


# -- the BERT-base-shaped case ----------------------------------------------------------------------
def bert_base_shapes(hidden=768, layers=12, ffn=3072, vocab=30522, positions=512):
    """The parameter shapes of BERT-base (199 tensors, about 110 M values)."""
    shapes = [(vocab, hidden), (positions, hidden), (2, hidden), (hidden,), (hidden,)]
    for _ in range(layers):
        shapes += [(hidden, hidden), (hidden,)] * 4            # query, key, value, output
        shapes += [(hidden,), (hidden,)]                       # attention layer norm
        shapes += [(hidden, ffn), (ffn,), (ffn, hidden), (hidden,)]
        shapes += [(hidden,), (hidden,)]                       # output layer norm
    shapes += [(hidden, hidden), (hidden,)]                    # pooler
    return shapes


BERT_VARIANTS = ["plain", "read_pass", "tf_dynamic", "nls_inf_nan", "nls_emulation",
                 "nls_inf_nan_2p", "nls_emulation_2p", "unscale_only"]


def build_bert(shapes):
    """One graph, shared variables and fixed gradients; returns {variant: train op}."""
    weights, fixed = [], []
    for i, shape in enumerate(shapes):
        # Random initializers, not numpy arrays: 880 MB of constants in the graph would take
        # gigabytes of memory once copied into the session.
        weights.append(tf.compat.v1.get_variable(
            "w%d" % i, shape, initializer=tf.compat.v1.random_normal_initializer(0, 0.02, 2 * i)))
        fixed.append(tf.compat.v1.get_variable(
            "g%d" % i, shape, trainable=False,
            initializer=tf.compat.v1.random_normal_initializer(0, 0.02, 2 * i + 1)))
    # Multiplied by a variable holding 1: without it Grappler drops the multiply by the constant
    # 1 that seeds plain's backpropagation, while every loss-scaled variant multiplies by the
    # scale there, and their overheads would count that extra work.
    unit = tf.compat.v1.get_variable("unit", initializer=1.0, trainable=False)
    loss = unit * tf.add_n([tf.reduce_sum(tf.stop_gradient(g) * w)
                            for g, w in zip(fixed, weights)])
    trains = {}
    for variant in BERT_VARIANTS:
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.0)
        if variant == "tf_dynamic":
            opt = tf_loss_scale_optimizer(opt)
        elif variant.startswith("nls_"):
            opt = nls.NPULossScaleOptimizer(
                opt, nls.ExponentialUpdateLossScaleManager(2 ** 15, 1000),
                backend=variant[len("nls_"):].replace("_2p", ""))
        elif variant == "unscale_only":
            opt = nls.NPULossScaleOptimizer(
                opt, nls.FixedLossScaleManager(2 ** 15, enable_overflow_check=False))
        saved = os.environ.get(FUSED_ENV)
        if variant.endswith("_2p"):
            os.environ[FUSED_ENV] = "off"
        try:
            with tf.name_scope(variant):
                grads_and_vars = opt.compute_gradients(loss, weights)
        finally:
            if saved is None:
                os.environ.pop(FUSED_ENV, None)
            else:
                os.environ[FUSED_ENV] = saved
        with tf.name_scope(variant):
            train = opt.apply_gradients(grads_and_vars)
            if variant == "read_pass":
                total = tf.add_n([tf.reduce_sum(g) for g, _ in grads_and_vars])
                train = tf.group(train, tf.debugging.assert_all_finite(total, "read pass"))
        trains[variant] = train
    return trains


def executed_kernels(sess, train):
    """{op type: kernels run} for one traced step of ``train``, after Grappler's rewrites."""
    meta = tf.compat.v1.RunMetadata()
    sess.run(train, options=tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE), run_metadata=meta)
    counts = {}
    for dev in meta.step_stats.dev_stats:
        for node in dev.node_stats:
            label = node.timeline_label.split(" = ", 1)[-1]
            op = label.split("(", 1)[0].strip()
            counts[op] = counts.get(op, 0) + 1
    return counts


def _quartiles(values):
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return med, q1, q3


def _ratio_interval(over, base, draws=2000, seed=0):
    """5th-95th percentile of median(over) / median(base) when the rounds are resampled."""
    over, base = np.asarray(over), np.asarray(base)
    rng = np.random.RandomState(seed)
    picks = rng.randint(0, len(over), size=(draws, len(over)))
    ratios = np.median(over[picks], axis=1) / np.median(base[picks], axis=1)
    return np.percentile(ratios, [5, 95])


def bench_bert(args):
    shapes = bert_base_shapes()
    graph = tf.Graph()
    with graph.as_default():
        trains = build_bert(shapes)
        init = tf.compat.v1.global_variables_initializer()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=2,
                                      inter_op_parallelism_threads=2)
    steps = args.steps or 2
    repeats = args.repeats or 30
    clocks = {"wall": {v: [] for v in BERT_VARIANTS}, "cpu": {v: [] for v in BERT_VARIANTS}}
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        for v in BERT_VARIANTS:
            for _ in range(3):
                sess.run(trains[v])
        kernels = {v: executed_kernels(sess, trains[v]) for v in BERT_VARIANTS}
        for r in range(repeats):
            # Round robin, the order rotated every round: each round times every variant under
            # about the same machine load, and no variant always follows the same one.
            shift = r % len(BERT_VARIANTS)
            for v in BERT_VARIANTS[shift:] + BERT_VARIANTS[:shift]:
                wall, cpu = time_steps_both(sess, trains[v], steps)
                clocks["wall"][v].append(wall)
                clocks["cpu"][v].append(cpu)
    params = sum(int(np.prod(s)) for s in shapes)
    print("TensorFlow %s, BERT-base shapes: %d tensors, %.1f M parameters, fixed gradients, "
          "SGD; %d rounds x %d steps per variant, round robin"
          % (tf.__version__, len(shapes), params / 1e6, repeats, steps))
    print("\nKernels run in one traced step (after Grappler's rewrites):")
    for v in BERT_VARIANTS:
        k = kernels[v]
        print("  %-14s %s" % (v, ", ".join("%s %d" % (op, k.get(op, 0))
                                         for op in ("Mul", "Sum", "IsFinite", "All",
                                                    "NlsUnscaleAndCheck"))))
    print("fused unscale-and-check kernel: %s" % (
        "used by nls_inf_nan and nls_emulation" if _kernels.load_unscale_check() is not None
        else "not available (%s)" % _kernels.unavailable_reason()))
    for clock, title in (("wall", "wall-clock ms per step"),
                         ("cpu", "CPU ms per step (all threads of this process; less "
                                 "sensitive to other processes than wall clock)")):
        _print_bert_table(clocks[clock], title)
    print("\nHow to read: overhead = a variant's ms/step minus plain's in the same round, median "
          "[quartiles] over the rounds; 'vs tf' = median overhead / tf_dynamic's median overhead, "
          "with the 5-95 % range when the rounds are resampled (bootstrap). Target: at most "
          "0.60x for nls_inf_nan and nls_emulation; unscale_only is the multiply they (and "
          "TensorFlow) cannot avoid. A range reaching past 0.60 means the run "
          "cannot tell: use more --repeats or a quieter machine. On a loaded machine trust the "
          "CPU table over the wall-clock one.")


def _print_bert_table(ms, title):
    over = {v: np.asarray(ms[v]) - np.asarray(ms["plain"]) for v in BERT_VARIANTS}
    read = np.median(over["read_pass"])
    theirs = np.median(over["tf_dynamic"])
    print("\n%s" % title)
    print("%-14s %20s %24s %11s %22s" % ("variant", "ms/step", "overhead ms", "read passes",
                                         "vs tf [5-95 %]"))
    for v in BERT_VARIANTS:
        med, q1, q3 = _quartiles(ms[v])
        line = "%-14s %6.1f [%5.1f, %5.1f]" % (v, med, q1, q3)
        if v != "plain":
            omed, oq1, oq3 = _quartiles(over[v])
            line += " %6.1f [%6.1f, %6.1f]" % (omed, oq1, oq3)
            line += " %11s" % ("%.2f" % (omed / read) if read > 0 else "n/a")
            if theirs > 0:
                lo, hi = _ratio_interval(over[v], over["tf_dynamic"])
                line += "   %5.2fx [%5.2f, %5.2f]" % (omed / theirs, lo, hi)
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=None,
                        help="steps per timed block (default 200; --bert: 2)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="round-robin rounds (default 5; --bert: 30)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--bert", action="store_true",
                        help="the BERT-base-shaped case (110 M parameters, fixed gradients)")
    args = parser.parse_args()
    if args.bert:
        bench_bert(args)
        return
    args.steps = args.steps or 200
    args.repeats = args.repeats or 5
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
