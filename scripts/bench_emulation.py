"""Cost of the emulated device (precision_mode and saturation) against plain float32 TensorFlow.

    python scripts/bench_emulation.py [--shapes cnn,keras,estimator] [--rounds 3] [--steps 12]

Each shape is trained, in one fresh process per variant and round, as

  fp32       plain float32 TensorFlow (the session config still names the NpuOptimizer and its
             precision_mode, as a script run with stand-in npu_bridge names has)  <- the baseline
  emulated   the emulated device: the precision_mode applied as ``npu-emulate`` applies it (TF1
             sessions rewritten when made, TF2 ops rounded as built), every rounding saturated
             into the float-status register
  every_op   emulated, and every float16 op of the model saturated (``--saturate-every-op``)
  emulated_ops
             emulated, with the package's kernels off (``NPU_LOSS_SCALE_FUSED_UNSCALE=off``):
             each rounding a Cast, the saturation as TensorFlow ops and a Cast back, as before
             the fused rounding (and where no compiler builds it)

The shapes: ``cnn``, a ResNet-style CNN (a 3x3 stem and two residual blocks of two 3x3
convolutions, Momentum) in a ``tf.compat.v1.Session`` whose config sets ``precision_mode``
(every stack); ``keras``, a small Keras CNN trained by ``fit`` under the precision mode
``npu_device`` opens with (TF 2 only); ``estimator``, the CNN as an Estimator ``model_fn``
whose ``RunConfig`` session config sets the mode (where ``tensorflow_estimator`` imports);
``bert``, the BERT main job's model and optimizer (examples/bert) in a Session, whose fp16 path
rounds at every op's output itself (``fp32`` builds the model in float32).

Rounds run the variants in a shuffled order, so a change of the machine's load touches all of
them. Per process it takes the first step (graph build, session or trace, rewrite, first run:
wall time from the start of the build to the end of step one) and the median of the later steps;
it prints, per shape and variant, the median over rounds and the ratio to ``fp32`` of the same
round (median, and min-max over rounds), of wall time and of the process's CPU time (all of
TensorFlow's threads; steadier than wall time on a machine other work shares). It also prints what the counters of the emulation
saw after step one: the precision rewrites of a session's graph (``rewrites``, ops rewritten in
brackets) and the ops rounded at trace time — both must stay 0 after the first step. Compare
ratios from one run, not across runs or machines; on a loaded machine say the load (``uptime``).
"""
import argparse
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import time

import checkout

VARIANTS = ("fp32", "emulated", "every_op", "emulated_ops")
SHAPES = ("cnn", "keras", "estimator", "bert")
MODE = "allow_mix_precision"


# -- the worker: one shape, one variant, one process ----------------------------------------------
def _session_config(tf):
    config = tf.compat.v1.ConfigProto()
    custom = config.graph_options.rewrite_options.custom_optimizers.add()
    custom.name = "NpuOptimizer"
    custom.parameter_map["precision_mode"].s = MODE.encode()
    return config


def _cnn(tf, images, labels, width):
    """Logits and loss of a small ResNet-style CNN built with tf.compat.v1 layers' math."""
    v1 = tf.compat.v1
    init = v1.glorot_uniform_initializer(seed=0)

    def conv(x, name, out):
        w = v1.get_variable(name, [3, 3, int(x.shape[-1]), out], tf.float32, init)
        return tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")

    h = tf.nn.relu(conv(images, "stem", width))
    for block in range(2):
        r = tf.nn.relu(conv(h, "b%d_1" % block, width))
        h = tf.nn.relu(h + conv(r, "b%d_2" % block, width))
    h = tf.reduce_mean(h, axis=[1, 2])
    w = v1.get_variable("dense", [width, 10], tf.float32, init)
    logits = tf.matmul(h, w)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    return loss


def _data(args):
    import numpy as np  # pylint: disable=import-outside-toplevel
    rng = np.random.RandomState(0)
    x = rng.rand(args.batch, args.size, args.size, 3).astype(np.float32)
    y = rng.randint(0, 10, args.batch).astype(np.int32)
    return x, y


def _every_op(variant):
    import contextlib  # pylint: disable=import-outside-toplevel
    if variant != "every_op":
        return contextlib.nullcontext()
    from npu_loss_scale.device import saturation  # pylint: disable=import-outside-toplevel
    return saturation.saturate_every_op()


def _run_cnn(tf, args, variant, marks):
    x, y = _data(args)
    with tf.Graph().as_default() as graph:
        with _every_op(variant):
            images = tf.compat.v1.placeholder(tf.float32, x.shape)
            labels = tf.compat.v1.placeholder(tf.int32, y.shape)
            loss = _cnn(tf, images, labels, args.width)
            opt = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9)
            train = opt.minimize(loss)
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=graph, config=_session_config(tf)) as sess:
            sess.run(init)
            for _ in range(args.steps):
                sess.run(train, {images: x, labels: y})
                marks.append(_now())
        return len(graph.get_operations())


def _run_keras(tf, args, variant, marks):
    x, y = _data(args)
    keras = tf.keras

    class Marks(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marks.append(_now())

    with _every_op(variant):
        inputs = keras.Input(x.shape[1:])
        h = keras.layers.Conv2D(args.width, 3, padding="same", activation="relu")(inputs)
        for _ in range(2):
            r = keras.layers.Conv2D(args.width, 3, padding="same", activation="relu")(h)
            r = keras.layers.Conv2D(args.width, 3, padding="same")(r)
            h = keras.layers.ReLU()(keras.layers.Add()([h, r]))
        h = keras.layers.GlobalAveragePooling2D()(h)
        model = keras.Model(inputs, keras.layers.Dense(10)(h))
        # Keras 3 must not compile with XLA (the register is a hash table); 2.6 has no argument
        xla = ({"jit_compile": False}
               if "jit_compile" in inspect.signature(model.compile).parameters else {})
        model.compile(keras.optimizers.SGD(0.01, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), **xla)
        xs = x.repeat(args.steps, axis=0)
        ys = y.repeat(args.steps, axis=0)
        model.fit(xs, ys, batch_size=args.batch, epochs=1, shuffle=False, verbose=0,
                  callbacks=[Marks()])
    return len(model.layers)


def _run_estimator(tf, args, variant, marks):
    import tensorflow_estimator  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    x, y = _data(args)
    estimator_lib = tf.compat.v1.estimator

    def model_fn(features, labels, mode):
        with _every_op(variant):
            loss = _cnn(tf, features, labels, args.width)
            step = tf.compat.v1.train.get_or_create_global_step()
            train = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, step)
        return estimator_lib.EstimatorSpec(mode, loss=loss, train_op=train)

    def input_fn():
        return tf.data.Dataset.from_tensors((x, y)).repeat()

    class Marks(tf.compat.v1.train.SessionRunHook):
        def after_run(self, run_context, run_values):
            marks.append(_now())

    import tempfile  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory() as model_dir:
        config = estimator_lib.RunConfig(model_dir=model_dir, session_config=_session_config(tf),
                                         save_checkpoints_steps=None, save_checkpoints_secs=None,
                                         save_summary_steps=None, log_step_count_steps=None)
        estimator = estimator_lib.Estimator(model_fn, config=config)
        estimator.train(input_fn, max_steps=args.steps, hooks=[Marks()])
    return 0


def _run_bert(tf, args, variant, marks):
    """The BERT main job's model (examples/bert: the all-MiniLM-L6-v2 shape, 6 layers of 384,
    randomly initialised) and its optimizer (Adam in NPULossScaleOptimizer, dynamic scaling), in
    a TF1 Session: ``fp32`` builds it in float32, the other variants with the job's fp16 path
    (a float16 boundary, rounded and saturated into the register, at every op's output)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, os.path.join(checkout.REPO, "examples", "bert"))
    import bert_modeling  # pylint: disable=import-outside-toplevel
    import npu_loss_scale as nls  # pylint: disable=import-outside-toplevel
    config = bert_modeling.BertConfig()
    rng = np.random.RandomState(0)
    seq = 64
    ids = rng.randint(0, config.vocab_size, (args.batch, seq)).astype(np.int32)
    mask = np.ones((args.batch, seq), np.int32)
    segments = np.zeros((args.batch, seq), np.int32)
    labels = rng.randint(0, 2, args.batch).astype(np.int32)
    with tf.Graph().as_default() as graph:
        with _every_op(variant):
            sequence = bert_modeling.encoder(tf.constant(ids), tf.constant(mask),
                                             tf.constant(segments), config,
                                             "fp32" if variant == "fp32" else "fp16",
                                             training=True)
            pooled = bert_modeling.mean_pool(sequence, tf.constant(mask))
            logits = bert_modeling.classifier_logits(pooled, 2, config, training=True)
            loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(tf.constant(labels), logits)
            manager = nls.ExponentialUpdateLossScaleManager(2 ** 15, 1000)
            optimizer = nls.NPULossScaleOptimizer(
                tf.compat.v1.train.AdamOptimizer(1e-4), manager)
            train = optimizer.minimize(loss, tf.compat.v1.train.get_or_create_global_step())
            init = tf.compat.v1.global_variables_initializer()
        # the job's session config names no precision_mode: its model rounds by itself
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(init)
            for _ in range(args.steps):
                sess.run(train)
                marks.append(_now())
        return len(graph.get_operations())


def worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["NPU_LOSS_SCALE_BACKEND"] = "emulation"
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.device import op_precision, precision  # pylint: disable=import-outside-toplevel
    if args.shape in ("cnn", "bert") and not tf.__version__.startswith("1."):
        tf.compat.v1.disable_eager_execution()   # a TF1 script's graph and Session
    if args.shape == "keras" and tf.__version__.startswith("1."):
        print(json.dumps({"skip": "Keras fit under npu_device is TF 2 code"}))
        return
    if args.shape == "estimator":
        try:
            import tensorflow_estimator  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        except ImportError:
            print(json.dumps({"skip": "tensorflow_estimator does not import"}))
            return
    if args.variant != "fp32":
        precision.install_session_hook()
        if args.shape == "keras":
            op_precision.install_op_precision(MODE)
    counters = precision.rewrite_counters
    marks = []
    run = {"cnn": _run_cnn, "keras": _run_keras, "estimator": _run_estimator,
           "bert": _run_bert}[args.shape]
    after_first = {}

    def note_first():
        after_first.update(counters.snapshot())

    marks_hook = _FirstStepNote(marks, note_first)
    start = _now()
    ops = run(tf, args, args.variant, marks_hook)
    steps = [b[0] - a[0] for a, b in zip(marks[:-1], marks[1:])]
    cpu = [b[1] - a[1] for a, b in zip(marks[:-1], marks[1:])]
    late = {k: v - after_first.get(k, 0) for k, v in counters.snapshot().items()}
    print(json.dumps({"first": marks[0][0] - start[0], "steady": statistics.median(steps),
                      "first_cpu": marks[0][1] - start[1], "steady_cpu": statistics.median(cpu),
                      "ops": ops, "after_first": late, "tf": tf.__version__}))


def _now():
    """(wall clock, CPU time of the process: every thread of TensorFlow's pools), in s."""
    return time.perf_counter(), time.process_time()


class _FirstStepNote(list):
    """The step marks; the counters are read when the first one comes in."""

    def __init__(self, marks, on_first):
        super().__init__()
        self._marks = marks
        self._on_first = on_first

    def append(self, value):
        if not self._marks:
            self._on_first()
        self._marks.append(value)


# -- the driver --------------------------------------------------------------------------------------
def _measure(args, shape, variant):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", shape, variant,
           "--steps", str(args.steps), "--batch", str(args.batch), "--size", str(args.size),
           "--width", str(args.width)]
    env = checkout.environment()
    if variant == "emulated_ops":
        env["NPU_LOSS_SCALE_FUSED_UNSCALE"] = "off"
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, check=False, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError("%s/%s failed (exit %d):\n%s" % (shape, variant, out.returncode,
                                                           out.stderr[-3000:]))
    return json.loads(lines[-1])


def _spread(values):
    return "%.2fx [%.2f-%.2f]" % (statistics.median(values), min(values), max(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=32, help="image height and width")
    parser.add_argument("--width", type=int, default=32, help="channels of every convolution")
    parser.add_argument("--worker", nargs=2, metavar=("SHAPE", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps must be at least 3 (one first step, two or more later ones); "
                     "got %d" % args.steps)
    if args.worker:
        args.shape, args.variant = args.worker
        worker(args)
        return
    shapes = [s for s in args.shapes.split(",") if s]
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        parser.error("--shapes takes a comma-separated list of %s; got %s" % (
            ", ".join(SHAPES), ", ".join(bad)))
    shuffle = random.Random(0).shuffle
    # the kernels are built (once per TensorFlow version) before any timed process
    subprocess.run([sys.executable, "-m", "npu_loss_scale", "build-kernel"], check=True,
                   stdout=subprocess.DEVNULL, env=checkout.environment())
    print("precision_mode %s; %d rounds; batch %d of %dx%dx3, %d channels, %d steps per process; "
          "%s" % (MODE, args.rounds, args.batch, args.size, args.size, args.width, args.steps,
                  os.popen("uptime").read().strip()))
    for shape in shapes:
        results = {v: [] for v in VARIANTS}
        order = list(VARIANTS)
        skipped = None
        for _ in range(args.rounds):
            shuffle(order)
            for variant in order:
                result = _measure(args, shape, variant)
                skipped = result.get("skip")
                if skipped:
                    break
                results[variant].append(result)
            if skipped:
                break
        if skipped:
            print("\n%s: skipped (%s)" % (shape, skipped))
            continue
        print("\n%s (TF %s)" % (shape, results["fp32"][0]["tf"]))
        print("%-12s %9s %18s %18s %9s %18s %18s  %s" % (
            "variant", "first s", "first vs fp32", "(CPU time)", "step ms", "step vs fp32",
            "(CPU time)", "after step 1: rewrites [ops], traced ops"))
        base = results["fp32"]
        for variant in VARIANTS:
            rows = results[variant]

            def ratios(key):
                return _spread([r[key] / b[key] for r, b in zip(rows, base)])  # pylint: disable=cell-var-from-loop
            print("%-12s %9.2f %18s %18s %9.1f %18s %18s  %d [%d], %d" % (
                variant, statistics.median(r["first"] for r in rows), ratios("first"),
                ratios("first_cpu"), 1000 * statistics.median(r["steady"] for r in rows),
                ratios("steady"), ratios("steady_cpu"),
                max(r["after_first"]["rewrites"] for r in rows),
                max(r["after_first"]["rewritten_ops"] for r in rows),
                max(r["after_first"]["traced_ops"] for r in rows)))

if __name__ == "__main__":
    main()
