"""Known answer: wasted_start.py's model computing in float32, its float16 boundary the package's
rounding (round_to_float16, as examples/bert rounds its activations): the gradient flowing back
through the rounding is the loss scale itself, so the same 17 steps at 2**32 ... 2**16 are
wasted, and the script is no float32 script."""
import numpy as np
import tensorflow.compat.v1 as tf

import session_loop
from npu_loss_scale import emulation


def build(features):
    with tf.name_scope("dense"):
        product = emulation.round_to_float16(
            tf.matmul(features, session_loop.kernel([2, 1], 1.0)))
    return tf.reduce_sum(product), tf.constant(0.0)


if __name__ == "__main__":
    session_loop.train(build, session_loop.arguments(init_loss_scale=2.0 ** 32),
                       np.ones([1, 2], np.float32))
