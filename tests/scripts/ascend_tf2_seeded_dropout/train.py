"""A TF2 script in the shape of Ascend's npu_device Keras scripts with their dropout patch
(``seeded_dropout``): ``tf.random.set_seed``, precision_mode on the device, a Keras model with
a dropout layer, ``fit`` through npu_device's ``NpuLossScaleOptimizer``. Prints, as JSON, the
(graph seed, op seed) pair each dropout was built with.

Run through ``python -m npu_loss_scale.emulate [--report FILE] train.py``.
"""
import json

import numpy as np
import tensorflow as tf

import npu_device as npu
import seeded_dropout

npu.global_options().precision_mode = "allow_mix_precision"
npu.open().as_default()
tf.random.set_seed(1234)

model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dropout(0.5), tf.keras.layers.Dense(1)])
model.compile(optimizer=npu.train.optimizer.NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.01)),
              loss="mse")
rng = np.random.default_rng(0)
model.fit(rng.standard_normal((8, 4)).astype(np.float32), np.ones((8, 1), np.float32),
          batch_size=4, epochs=1, verbose=0)
print(json.dumps({"seeds": seeded_dropout.SEEDS}))
