"""A TF2 training script in the shape of Ascend's npu_device scripts: open the device, set its
options, train a Keras model in mixed float16 through npu_device's NpuLossScaleOptimizer.

Run through ``python -m npu_loss_scale.emulate --saturate-every-op``: every float16 op saturates
as on the device, so the batch scaled by 1e5 overflows where no value turns inf. Prints one JSON
line per step: the scale the step started from, whether it was finite, whether weights moved.
"""
import json

import numpy as np
import tensorflow as tf

import npu_device as npu
from npu_device.train.optimizer import NpuLossScaleOptimizer

npu.global_options().op_debug_level = 0
npu.open().as_default()

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1, dtype="float32")])
opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.01), initial_scale=16.0)
model.compile(optimizer=opt, loss="mse")

rng = np.random.default_rng(0)
x = rng.standard_normal((16, 4)).astype(np.float32)
y = np.zeros((16, 1), np.float32)
for step, boost in enumerate([1.0, 1e5, 1.0]):
    before = [w.copy() for w in model.get_weights()]
    scale = float(opt.loss_scale)
    model.train_on_batch(x * boost, y)
    moved = any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    print(json.dumps({"event": "step", "step": step, "scale_before": scale,
                      "finite": bool(opt.last_step_finite.numpy()), "weights_moved": moved}))
