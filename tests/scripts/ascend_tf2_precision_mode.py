"""A TF2 script in the shape of Ascend's npu_device Keras scripts that set precision_mode on the
device, not in the model: a float32 Keras model, ``npu.global_options().precision_mode`` from
the command line, ``npu.open().as_default()``, ``model.compile`` with npu_device's
``NpuLossScaleOptimizer`` and a few ``train_on_batch`` steps.

Run through ``python -m npu_loss_scale.emulate script.py MODE``. Prints one JSON line per step:
the loss scale the step started from, whether its gradients were finite, whether weights moved.
On the device (and in the emulation) ``allow_mix_precision`` computes the matmuls in float16, so
a scale of 2**20 overflows the backward matmuls; in ``force_fp32`` nothing overflows.
"""
import json
import random
import sys

import numpy as np
import tensorflow as tf

import npu_device as npu
from npu_device.train.optimizer import NpuLossScaleOptimizer

npu.global_options().precision_mode = sys.argv[1]
npu.open().as_default()

# the seeds tf.keras.utils.set_random_seed sets (Keras 2.7 on; TF 2.6's Keras lacks it)
random.seed(0)
np.random.seed(0)
tf.random.set_seed(0)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1)])
opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.01), dynamic=True,
                            initial_scale=2.0 ** 20)
model.compile(optimizer=opt, loss="mse")

rng = np.random.default_rng(0)
x = rng.standard_normal((16, 4)).astype(np.float32)
y = np.full((16, 1), 3.0, np.float32)
for step in range(8):
    before = [w.copy() for w in model.get_weights()]
    scale = float(opt.loss_scale)
    model.train_on_batch(x, y)
    moved = any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    print(json.dumps({"event": "step", "step": step, "scale_before": scale,
                      "finite": bool(opt.last_step_finite.numpy()), "weights_moved": moved}))
