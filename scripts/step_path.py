"""Which files of the package one training step passes through, in the order first entered.

Builds a one-variable model, wraps its optimizer, runs one step, and records (with
``sys.setprofile``) every function of the package called from the optimizer's first method to
the end of the step's ``session.run`` (a module's first import left out). Prints the files in
order, their count, and every call from a file into a function of a file of a higher layer (the
layers of tests/test_layers.py; methods of objects handed down, such as a manager's, do not
count), which the layout should leave at none.

    python scripts/step_path.py                       # NPULossScaleOptimizer, TF1 graph
    python scripts/step_path.py --front-end grad_scaler   # GradScaler, one eager step
    python scripts/step_path.py --json

It measures the package's layout (docs/architecture.md draws the same path); it is not a test.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402

PACKAGE_DIR = os.path.dirname(os.path.abspath(nls.__file__))


sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import test_layers  # noqa: E402  (the layers, as the layer test defines them)
sys.path.pop(0)


def _layer_of(relpath):
    """The layer (tests/test_layers.py's LAYERS) of a package file, by its first folder."""
    module = relpath[:-3].replace(os.sep, ".")
    return test_layers.LAYER_OF.get(test_layers.unit_of(module))


class Recorder:
    """Package files entered while recording, in first-entered order, and the calls made from a
    package file into a function of a file of a higher layer (a call back up; a method called on
    an object the lower layer was handed, such as a manager's, does not count: that is the
    lower layer's contract, not knowledge of the higher one)."""

    def __init__(self):
        self.files = []
        self.calls_up = set()
        self._seen = set()

    def __call__(self, frame, event, arg):  # pylint: disable=unused-argument
        if event != "call":
            return
        path, name = frame.f_code.co_filename, frame.f_code.co_name
        if name in ("<module>", "find_spec"):  # a module's first import, not the step's path
            return
        if not path.startswith(PACKAGE_DIR):
            return
        rel = os.path.relpath(path, os.path.dirname(PACKAGE_DIR))
        if path not in self._seen:
            self._seen.add(path)
            self.files.append(rel)
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] in ("self", "cls"):
            return  # a method, reached through an object the caller was handed, not an import
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        if caller.startswith(PACKAGE_DIR) and caller != path:
            caller_rel = os.path.relpath(caller, os.path.dirname(PACKAGE_DIR))
            up, down = _layer_of(rel), _layer_of(caller_rel)
            if up is not None and down is not None and up > down:
                self.calls_up.add("%s -> %s" % (caller_rel, rel))

    def __enter__(self):
        sys.setprofile(self)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


def npu_loss_scale_optimizer_step():
    """Builds and runs one step; returns the recorder."""
    tf.compat.v1.disable_eager_execution()
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        loss = tf.reduce_sum(tf.square(w))
        manager = nls.ExponentialUpdateLossScaleManager(
            init_loss_scale=2 ** 10, incr_every_n_steps=100, decr_every_n_nan_or_inf=2,
            decr_ratio=0.5)
        optimizer = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                              manager, backend="emulation")
        with Recorder() as recorder:
            train = optimizer.minimize(loss)
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(train)
    return recorder


def grad_scaler_step():
    """One eager GradScaler step; returns the recorder."""
    if not tf.executing_eagerly():
        tf.compat.v1.enable_eager_execution()  # TensorFlow 1.15 starts in graph mode
    w = tf.Variable([1.0, 2.0])
    inner = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=2.0 ** 10, backend="emulation")
    with Recorder() as recorder:
        with tf.GradientTape() as tape:
            loss = scaler.scale(tf.reduce_sum(tf.square(w)))
        grads = tape.gradient(loss, [w])
        scaler.step(inner, list(zip(grads, [w])))
        scaler.update()
    return recorder


STEPS = {"npu_loss_scale_optimizer": npu_loss_scale_optimizer_step,
         "grad_scaler": grad_scaler_step}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--front-end", choices=sorted(STEPS), default="npu_loss_scale_optimizer")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    args = parser.parse_args(argv)
    recorder = STEPS[args.front_end]()
    files, calls_up = recorder.files, sorted(recorder.calls_up)
    if args.json:
        print(json.dumps({"front_end": args.front_end, "files": files, "count": len(files),
                          "calls_up": calls_up}))
    else:
        for path in files:
            print(path)
        for call in calls_up:
            print("call back up:", call)
        print("%d package files in one %s step, %d calls back up a layer"
              % (len(files), args.front_end, len(calls_up)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
