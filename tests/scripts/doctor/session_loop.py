"""The Session loop the doctor's known-answer scripts share, written as Ascend's TF1 scripts are:
``from npu_bridge.npu_init import *``, an ``ExponentialUpdateLossScaleManager`` and an
``NPULossScaleOptimizer`` around plain SGD, a feed per step, the loss printed."""
import argparse

import numpy as np
import tensorflow.compat.v1 as tf
from npu_bridge.npu_init import *  # noqa: F401,F403  pylint: disable=wildcard-import,unused-wildcard-import


def arguments(**defaults):
    """The scripts' command line: --steps and the manager's settings."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=defaults.get("steps", 40))
    parser.add_argument("--init_loss_scale", type=float,
                        default=defaults.get("init_loss_scale", 2.0 ** 10))
    parser.add_argument("--decr_ratio", type=float, default=defaults.get("decr_ratio", 0.5))
    return parser.parse_args()


def train(build, args, batch):
    """Builds ``build(features) -> (loss, extra fetches)`` and runs ``args.steps`` steps on
    ``batch`` (a float32 array), feeding it every step."""
    with tf.Graph().as_default():
        features = tf.placeholder(tf.float32, batch.shape, name="features")
        loss, extra = build(features)
        manager = ExponentialUpdateLossScaleManager(  # noqa: F405
            init_loss_scale=args.init_loss_scale, incr_every_n_steps=1000,
            decr_every_n_nan_or_inf=1, decr_ratio=args.decr_ratio)
        opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(1e-3), manager)  # noqa: F405
        train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for step in range(args.steps):
                _, value, _ = sess.run([train_op, loss, extra], {features: batch})
                print("step %d loss %.4g" % (step + 1, value))


def kernel(shape, value=0.5):
    return tf.get_variable("kernel", shape, initializer=tf.constant_initializer(value))


BATCH = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
