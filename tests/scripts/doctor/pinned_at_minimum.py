"""Known answer: a float32 script whose matmul precision_mode allow_mix_precision runs in float16
on the device; its forward result (about 1.8e5) overflows float16 at every loss scale, every
step is skipped and ExponentialUpdateLossScaleManager's scale falls to its minimum, 1, and stays
there. Keeping MatMul in float32 (modify_mixlist's black list) removes every skip."""
import numpy as np
import tensorflow.compat.v1 as tf

import session_loop


def build(features):
    with tf.name_scope("dense"):
        product = tf.matmul(features, session_loop.kernel([2, 1], 300.0))
    return tf.reduce_mean(product) * 1e-6, tf.constant(0.0)


if __name__ == "__main__":
    session_loop.train(build, session_loop.arguments(init_loss_scale=8.0),
                       np.full([1, 2], 300.0, np.float32))
