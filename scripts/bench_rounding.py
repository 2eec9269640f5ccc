"""What one rounding pass of the emulated device costs, and how much a step of the benchmark's
shapes rounds: the floor under ``scripts/bench_emulation.py``'s per-step ratios.

    python scripts/bench_rounding.py [--repeats 10]

Prints, on this stack:

* the fused rounding's cost per million float32 elements (``NlsRoundHalfSaturate``: float32 to
  float16 and back, saturated, its flags): a chain of 40 roundings of a 32x32x32x32 tensor in a
  Session, wall and CPU time;
* the roundings of the ``cnn`` shape's graph once its session rewrote it (``allow_mix_precision``)
  and of the ``keras`` shape's traced training step (TF 2 with Keras 2: Keras 3 does not keep
  the traced step where this script can find it), as a count and as elements per step;
* the elements times the cost: the rounding time a step of each shape cannot do without.
"""
import argparse
import os
import sys
import time

import checkout   # scripts/, next to this file

sys.path.insert(0, checkout.REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["NPU_LOSS_SCALE_BACKEND"] = "emulation"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import bench_emulation  # noqa: E402  pylint: disable=wrong-import-position
from npu_loss_scale._internal import kernels  # noqa: E402
from npu_loss_scale.device import op_precision, precision  # noqa: E402

MODE = bench_emulation.MODE


class _Shape:   # the benchmark's default shape
    batch, size, width, steps = 32, 32, 32, 2


def cost_per_million(repeats):
    """The fused rounding's (wall ms, CPU ms) per million elements: a chain of roundings (each
    link reads the previous one's result, so none can be skipped or merged) in a Session."""
    fused = kernels.load_unscale_check()
    if fused is None:
        raise SystemExit("the package's kernels are not built on this stack: "
                         "python -m npu_loss_scale build-kernel says why")
    links = 40
    data = np.random.RandomState(0).randn(32, 32, 32, 32).astype(np.float32)
    with tf.Graph().as_default():
        value = tf.compat.v1.placeholder(tf.float32, data.shape)
        out = value
        for _ in range(links):
            out, _ = fused.nls_round_half_saturate(out)
        total = tf.reduce_sum(out)
        with tf.compat.v1.Session() as sess:
            sess.run(total, {value: data})
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(repeats):
                sess.run(total, {value: data})
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    per = repeats * links * data.size / 1e6
    return 1e3 * wall / per, 1e3 * cpu / per


def _roundings(graph):
    ops = [op for op in graph.get_operations() if op.type == "NlsRoundHalfSaturate"]
    return len(ops), sum(op.inputs[0].shape.num_elements() or 0 for op in ops)


def cnn_roundings():
    """The cnn shape's graph as its session rewrote it (found among the live graphs)."""
    import gc  # pylint: disable=import-outside-toplevel
    precision.install_session_hook()
    bench_emulation._run_cnn(tf, _Shape, "emulated", [])  # pylint: disable=protected-access
    graphs = [o for o in gc.get_objects() if isinstance(o, tf.Graph)
              and not hasattr(o, "outer_graph")   # a session's graph, not a traced function's
              and any(op.type == "NlsRoundHalfSaturate" for op in o.get_operations())]
    return _roundings(graphs[-1]) if graphs else None


def keras_roundings():
    op_precision.install_op_precision(MODE)
    model = []
    original = tf.keras.Model.fit

    def fit(self, *args, **kwargs):
        model.append(self)
        return original(self, *args, **kwargs)

    tf.keras.Model.fit = fit
    try:
        bench_emulation._run_keras(tf, _Shape, "emulated", [])  # pylint: disable=protected-access
        step = getattr(model[0], "train_function", None)
        # listing may trace the step again: done while the precision mode is installed
        concrete = getattr(step, "_list_all_concrete_functions_for_serialization", None)
        return None if concrete is None else max(_roundings(f.graph) for f in concrete())
    finally:
        tf.keras.Model.fit = original
        op_precision.uninstall_op_precision()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1; got %d" % args.repeats)
    r_wall, r_cpu = cost_per_million(args.repeats)
    print("TF %s; %s" % (tf.__version__, os.popen("uptime").read().strip()))
    print("fused rounding per million elements: %.3f ms wall, %.3f ms CPU" % (r_wall, r_cpu))
    shapes = [("cnn", cnn_roundings)]
    if not tf.__version__.startswith("1."):
        shapes.append(("keras", keras_roundings))
    for name, count in shapes:
        found = count()
        if found is None:
            print("%s: the traced step was not found (Keras 3)" % name)
            continue
        n, elements = found
        print("%s: %d roundings, %.1f million elements a step: %.1f ms wall, %.1f ms CPU of "
              "rounding a step" % (name, n, elements / 1e6, elements / 1e6 * r_wall,
                                   elements / 1e6 * r_cpu))


if __name__ == "__main__":
    main()
