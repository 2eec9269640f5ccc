"""The shape of the ``npu_ops.py`` + ``npu_convert_dropout.py`` pair Ascend's TF2 models carry:
Keras's ``Dropout.call`` replaced by a dropout whose op seed, when a global seed is set and the
layer has none, is the graph's private ``_last_id`` (TF 2.4). The device's dropout kernels are
not needed here: the mask comes from ``tf.random.stateless_uniform`` with those seeds."""
import tensorflow as tf
from tensorflow.python.framework import ops

SEEDS = []  # (graph seed, op seed) of every dropout built


def op_seeds(layer_seed):
    graph = ops.get_default_graph()
    if graph.seed is None:
        return (0, 0) if layer_seed is None else (87654321, layer_seed)
    return graph.seed, graph._last_id if layer_seed is None else layer_seed  # pylint: disable=protected-access


def seeded_dropout_call(self, inputs, training=None):
    if not training:
        return tf.identity(inputs)
    seeds = op_seeds(self.seed)
    SEEDS.append([int(s) for s in seeds])
    keep = 1.0 - self.rate
    mask = tf.random.stateless_uniform(tf.shape(inputs), seed=list(seeds)) < keep
    return tf.where(mask, inputs / keep, tf.zeros_like(inputs))


tf.keras.layers.Dropout.call = seeded_dropout_call
