"""Known answer: a FixedLossScaleManager(10, enable_overflow_check=False), as Ascend's scripts
with a fixed scale write it: every step is applied, none is checked, and the doctor still
records each step and its scale (skipped unknown: null)."""
import numpy as np
import tensorflow.compat.v1 as tf
from npu_bridge.npu_init import *  # noqa: F401,F403  pylint: disable=wildcard-import,unused-wildcard-import

if __name__ == "__main__":
    with tf.Graph().as_default():
        features = tf.placeholder(tf.float32, [1, 2], name="features")
        kernel = tf.get_variable("kernel", [2, 1], initializer=tf.constant_initializer(0.5))
        loss = tf.reduce_sum(tf.matmul(tf.cast(features, tf.float16), tf.cast(kernel, tf.float16)))
        manager = FixedLossScaleManager(10, enable_overflow_check=False)  # noqa: F405
        opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(1e-3), manager)  # noqa: F405
        train_op = opt.minimize(tf.cast(loss, tf.float32),
                                global_step=tf.train.get_or_create_global_step())
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for step in range(4):
                sess.run(train_op, {features: np.ones([1, 2], np.float32)})
