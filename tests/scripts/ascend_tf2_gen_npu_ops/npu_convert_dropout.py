"""Imported for its effect, as in the ModelZoo TF2 models: Keras Dropout runs npu_ops.dropout."""
import tensorflow as tf

import npu_ops


def _npu_dropout_call(self, inputs, training=None):
    if not training:
        return tf.identity(inputs)
    return npu_ops.dropout(inputs, keep_prob=1 - self.rate, seed=getattr(self, "seed", None))


tf.keras.layers.Dropout.call = _npu_dropout_call
