"""Prints the package files one training step runs code in, for two front ends.

  NPULossScaleOptimizer  a tf.compat.v1 graph (ExponentialUpdateLossScaleManager, the emulation
                         backend, one process): compute_gradients, apply_gradients, one
                         session.run of the train op
  GradScaler             eager TF2: scale, tape gradient, step, update

A step is run once to warm up (imports, lazily built state, kernel loading), then once more under
``sys.setprofile``; every function call whose code lives in the package counts its file. The
count is what docs/architecture.md quotes as "files one step crosses".

  python scripts/step_files.py
"""
import os
import sys

import tensorflow as tf

import npu_loss_scale as nls

PACKAGE = os.path.dirname(os.path.abspath(nls.__file__))


def _profiled(fn):
    files = set()

    def profile(frame, event, arg):  # pylint: disable=unused-argument
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(PACKAGE):
                files.add(os.path.relpath(path, os.path.dirname(PACKAGE)))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return sorted(files)


def npu_optimizer_step():
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        loss = tf.reduce_sum(w * w)
        opt = nls.NPULossScaleOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1),
            nls.ExponentialUpdateLossScaleManager(2.0 ** 10, 1000), backend="emulation")
        train = opt.apply_gradients(opt.compute_gradients(loss, [w]))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)


def grad_scaler_step(scaler, w, opt):
    with tf.GradientTape() as tape:
        loss = scaler.scale(tf.reduce_sum(w * w))
    grads = tape.gradient(loss, [w])
    scaler.step(opt, list(zip(grads, [w])))
    scaler.update()


def main():
    npu_optimizer_step()
    npu_files = _profiled(npu_optimizer_step)
    scaler = nls.GradScaler(backend="emulation")
    w = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(0.1)
    grad_scaler_step(scaler, w, opt)
    scaler_files = _profiled(lambda: grad_scaler_step(scaler, w, opt))
    for title, files in (("NPULossScaleOptimizer step", npu_files),
                         ("GradScaler step", scaler_files)):
        print("%s: %d package files" % (title, len(files)))
        for path in files:
            print("  " + path)


if __name__ == "__main__":
    main()
