"""Known answer: ExponentialUpdateLossScaleManager(init_loss_scale=2**32, decr_ratio=0.5,
decr_every_n_nan_or_inf=1) on a model whose float16 matmul sees the loss scale itself in its
gradient (the gradient of sum(x @ kernel) with x all ones is the scale): every scale above
65504 overflows the backward matmul, so the run wastes the steps at 2**32 ... 2**16."""
import numpy as np
import tensorflow.compat.v1 as tf

import session_loop


def build(features):
    with tf.name_scope("dense"):
        product = tf.matmul(tf.cast(features, tf.float16),
                            tf.cast(session_loop.kernel([2, 1], 1.0), tf.float16))
    return tf.reduce_sum(tf.cast(product, tf.float32)), tf.constant(0.0)


if __name__ == "__main__":
    session_loop.train(build, session_loop.arguments(init_loss_scale=2.0 ** 32),
                       np.ones([1, 2], np.float32))
