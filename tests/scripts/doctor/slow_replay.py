"""Robustness: a Session loop with eight float16 overflows on the loss's path and a host op
that returns at once in the two steps the doctor records and takes 60 s in every later run of
the graph: each session run of the doctor's replay after the steps stays 60 s in TensorFlow's
C code (as one pass of a large model's replay can), the time a test has to send SIGTERM."""
import time

import numpy as np
import tensorflow.compat.v1 as tf

import session_loop

SITES = 8
_CALLS = []


def _slow_zero(value):
    _CALLS.append(1)
    if len(_CALLS) > 2:
        time.sleep(60.0)
    return np.zeros_like(value)


def build(features):
    parts = []
    for index in range(SITES):
        with tf.name_scope("site%d" % index):
            kernel = tf.get_variable("kernel%d" % index, [2],
                                     initializer=tf.constant_initializer(1.0))
            big = tf.cast(features, tf.float16) * tf.cast(kernel, tf.float16)
            big = big * tf.constant(40000.0, tf.float16)   # 4e4 * 2 > 65504 at x = 2
            parts.append(tf.reduce_sum(tf.minimum(tf.cast(big, tf.float32), 1.0)))
    loss = tf.add_n(parts)
    slow = tf.numpy_function(_slow_zero, [loss], tf.float32, name="slow_host_op")
    return loss + tf.reshape(slow, []), tf.constant(0.0)


if __name__ == "__main__":
    session_loop.train(build, session_loop.arguments(steps=4),
                       np.array([[2.0, 2.0]], np.float32))
