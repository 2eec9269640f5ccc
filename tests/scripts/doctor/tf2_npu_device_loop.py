"""Known answer, TF2 custom loop in the shape of Ascend's TF2 adapter: ``npu_device.open()``,
npu_device's ``NpuLossScaleOptimizer`` around SGD, a ``tf.function`` step that scales the loss,
unscales the gradients (Keras 2; Keras 3's optimizer unscales them in ``apply_gradients``) and
applies them. The gradient reaching the float16 product is the loss scale: 2**17 and 2**16
overflow float16 (max 65504), 2**15 does not, so a start at 2**17 skips two steps. The loss
(1 * 1 = 1) is returned by the step and stays 1 until a step is applied."""
import npu_device
import tensorflow as tf
from npu_device.train.optimizer import NpuLossScaleOptimizer

npu_device.open().as_default()

w = tf.Variable([[1.0]])
optimizer = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.01), initial_scale=2.0 ** 17)
x = tf.ones([1, 1])


@tf.function
def train_step(inputs):
    with tf.GradientTape() as tape:
        product = tf.matmul(tf.cast(inputs, tf.float16), tf.cast(w, tf.float16))
        loss = tf.reduce_sum(tf.cast(product, tf.float32))
        if hasattr(optimizer, "get_scaled_loss"):     # Keras 2
            scaled = optimizer.get_scaled_loss(loss)
        else:                                          # Keras 3
            scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, [w])
    if hasattr(optimizer, "get_unscaled_gradients"):
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(grads_and_vars=zip(grads, [w]))
    return loss


for step in range(10):
    print("step", step, "loss", float(train_step(x)))
