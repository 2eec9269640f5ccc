"""Helper module of the TF1 script (test fixture): the user's own file, also TF1 in TF1 mode."""
import tensorflow as tf


class PlainSGD(tf.train.Optimizer):
    """A TF1 optimizer subclass, as ModelZoo scripts write them."""

    def __init__(self, learning_rate):
        super(PlainSGD, self).__init__(use_locking=False, name="PlainSGD")
        self._lr = learning_rate

    def _apply_dense(self, grad, var):
        return tf.assign_sub(var, self._lr * grad)

    _resource_apply_dense = _apply_dense


def build(x):
    kernel = tf.get_variable("kernel", [2, 1], initializer=tf.ones_initializer())
    return kernel, tf.reduce_sum(tf.matmul(x, kernel))
