"""A TF1 training script in the shape Ascend's adapter expects, with one flaw: the float16 `exp`
of a metric logged after each step overflows. The loss never does, yet on the device
(saturation mode) the sticky float-status register keeps the overflow and the next step is
skipped: every step after the first. Try:

    npu-loss-scale doctor --steps 4 train.py
"""
import argparse

import numpy as np
import tensorflow.compat.v1 as tf
from npu_bridge.npu_init import *  # noqa: F401,F403  pylint: disable=wildcard-import,unused-wildcard-import


def main(steps):
    with tf.Graph().as_default():
        features = tf.placeholder(tf.float32, [2, 2], name="features")
        kernel = tf.get_variable("kernel", [2, 1], initializer=tf.constant_initializer(0.5))
        logits = tf.matmul(features, kernel)
        loss = tf.reduce_mean(tf.square(logits - 1.0))
        with tf.name_scope("metric"):
            score = tf.exp(tf.cast(logits * 20.0, tf.float16))   # exp(30) > 65504: overflows
            metric = tf.reduce_mean(tf.cast(score, tf.float32))
        manager = ExponentialUpdateLossScaleManager(  # noqa: F405
            init_loss_scale=2.0 ** 10, incr_every_n_steps=1000, decr_every_n_nan_or_inf=1,
            decr_ratio=0.5)
        opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(1e-3), manager)  # noqa: F405
        train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
        batch = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for step in range(steps):
                _, value = sess.run([train_op, loss], {features: batch})
                score_value = sess.run(metric, {features: batch})   # logged after the step
                print("step %d loss %.4g metric %.4g" % (step + 1, value, score_value))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    main(parser.parse_args().steps)
