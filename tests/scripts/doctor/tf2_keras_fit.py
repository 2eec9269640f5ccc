"""Known answer, TF2 Keras: ``model.fit`` with the Keras ``NpuLossScaleOptimizer`` around SGD on
a one-weight model whose output passes a float16 matmul: with one sample a batch and the loss
the output itself, the gradient reaching the float16 output is the loss scale, which overflows
float16 above 65504. ``--initial-scale`` (default 2**18) starts the scale: 2**18 skips the steps
at 2**18, 2**17 and 2**16 (the scale halves at each); 2**10 skips none (and the scale stays, the
growth coming after 2000 finite steps). The weight starts at 1 and the input is 1, so the loss is
1 until a step is applied."""
import argparse

import numpy as np
import tensorflow as tf

from npu_loss_scale.keras import NpuLossScaleOptimizer


class HalfDense(tf.keras.layers.Layer):
    """x @ w computed in float16, returned in float32."""

    def build(self, input_shape):
        self.w = self.add_weight(name="w", shape=(int(input_shape[-1]), 1), initializer="ones")

    def call(self, inputs):
        product = tf.matmul(tf.cast(inputs, tf.float16), tf.cast(self.w, tf.float16))
        return tf.cast(product, tf.float32)


def output_as_loss(y_true, y_pred):
    return tf.reduce_sum(y_pred, axis=-1) + 0.0 * tf.reduce_sum(y_true, axis=-1)


parser = argparse.ArgumentParser()
parser.add_argument("--initial-scale", type=float, default=2.0 ** 18)
args = parser.parse_args()

model = tf.keras.Sequential([tf.keras.Input((1,)), HalfDense()])
optimizer = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.01), initial_scale=args.initial_scale)
# the emulated float-status register cannot be XLA-compiled (Keras 2.6 has no jit_compile)
options = {} if tf.__version__.startswith("2.6.") else {"jit_compile": False}
model.compile(optimizer=optimizer, loss=output_as_loss, **options)
model.fit(np.ones([16, 1], np.float32), np.zeros([16, 1], np.float32), batch_size=1, epochs=1,
          verbose=0)
print("last scale", float(optimizer.loss_scale))
