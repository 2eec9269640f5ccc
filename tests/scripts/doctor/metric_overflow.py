"""Known answer: a float16 exp computed for a logged metric overflows; the loss never does. Benign
in both modes (no path to the update); in saturation mode the sticky register skips every step
after the first all the same."""
import tensorflow.compat.v1 as tf

import session_loop


def build(features):
    logits = tf.matmul(features, session_loop.kernel([2, 1]))
    loss = tf.reduce_mean(tf.square(logits - 1.0))
    with tf.name_scope("metric"):
        score = tf.exp(tf.cast(logits * 20.0, tf.float16))   # exp(30) > 65504: overflows
        metric = tf.reduce_mean(tf.cast(score, tf.float32))
    return loss, metric


if __name__ == "__main__":
    session_loop.train(build, session_loop.arguments(), session_loop.BATCH)
