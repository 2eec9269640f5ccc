"""Known answer: a float16 log over zero padding that a tf.where masks out after the log. Benign
in saturation mode (log(0) saturates to -65504, the masked gradient is 0 * 65504 = 0); harmful in
INF/NaN mode (the masked branch's gradient is 0 * inf = NaN)."""
import numpy as np
import tensorflow.compat.v1 as tf

import session_loop

#: Two sequences of three, the second padded with zeros after its first element.
LENGTHS = np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], np.float32)


def build(features, masked=True):
    weight = session_loop.kernel([3], 2.0)
    mask = tf.constant(LENGTHS > 0)
    with tf.name_scope("padding"):
        scores = tf.cast(features * weight, tf.float16)     # zero where padded
        logs = tf.log(scores)                                # log(0) = -inf
        if masked:
            logs = tf.where(mask, logs, tf.zeros_like(logs))
    loss = -tf.reduce_mean(tf.cast(logs, tf.float32))
    return loss, tf.constant(0.0)


if __name__ == "__main__":
    session_loop.train(build, session_loop.arguments(), LENGTHS)
