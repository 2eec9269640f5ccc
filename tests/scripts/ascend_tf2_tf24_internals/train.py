"""A TF2 script in the shape of Ascend's BertLarge pre-training: its own TF 2.4-style optimizer
(``step_optimizer``) wrapped in npu_device's ``NpuLossScaleOptimizer``, precision_mode on the
device, a custom loop in a ``tf.function``. Run through ``python -m npu_loss_scale.emulate
[--report FILE] train.py``; prints one JSON line: the optimizer classes and what the optimizer
saw of the TF internals it reads."""
import json
import random

import numpy as np
import tensorflow as tf

import npu_device as npu
import step_optimizer

npu.global_options().precision_mode = "allow_mix_precision"
npu.open().as_default()

# the seeds tf.keras.utils.set_random_seed sets (Keras 2.7 on; TF 2.6's Keras lacks it)
random.seed(0)
np.random.seed(0)
tf.random.set_seed(0)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
optimizer = npu.train.optimizer.NpuLossScaleOptimizer(step_optimizer.PlainSGD(0.01))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


x, y = np.ones((4, 4), np.float32), np.zeros((4, 1), np.float32)
for _ in range(2):
    train_step(x, y)
print(json.dumps({"optimizer": type(optimizer).__name__,
                  "inner": type(optimizer.inner_optimizer).__name__,
                  "seen": step_optimizer.SEEN}))
