"""Robustness: a float32 script that trains without any loss-scale optimizer."""
import tensorflow.compat.v1 as tf

with tf.Graph().as_default():
    weight = tf.get_variable("w", [2], initializer=tf.ones_initializer())
    step = tf.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tf.square(weight)))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(3):
            sess.run(step)
print("trained without loss scaling")
