"""A TF2 script in the shape of the model-garden code of Ascend's TF2 NLP models: the dtype
policy set through TF 2.4's ``tf.keras.mixed_precision.experimental`` (``Policy(name,
loss_scale=...)``, ``set_policy``, ``global_policy``), ``precision_mode`` on the device, a Keras
model trained with ``train_on_batch`` through npu_device's ``NpuLossScaleOptimizer``.

Run through ``python -m npu_loss_scale.emulate [--report FILE] script.py DTYPE`` (``fp16`` or
``fp32``). Prints one JSON line: the global policy, the loss scale its Policy carried, the compute
dtype of the model's first layer and the number of steps run.
"""
import json
import sys

import numpy as np
import tensorflow as tf

import npu_device as npu


def set_mixed_precision_policy(dtype, loss_scale=None):
    experimental = tf.keras.mixed_precision.experimental
    if dtype == "fp16":
        policy = experimental.Policy("mixed_float16", loss_scale=loss_scale)
        experimental.set_policy(policy)
        return loss_scale_name(policy.loss_scale)
    experimental.set_policy("float32")
    return None


def loss_scale_name(loss_scale):
    """The loss scale a Policy carries, as printable text: TF 2.6's own experimental Policy holds
    a ``DynamicLossScale`` object, the TF 2.4 mapping of later releases the string "dynamic"."""
    if loss_scale is None or isinstance(loss_scale, str):
        return loss_scale
    return "dynamic" if type(loss_scale).__name__ == "DynamicLossScale" else repr(loss_scale)


npu.global_options().precision_mode = "allow_mix_precision"
npu.open().as_default()
carried = set_mixed_precision_policy(sys.argv[1], loss_scale="dynamic")

model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1, dtype="float32")])
# no XLA (the emulated register is not XLA-compilable): Keras 3 must be told, TF 2.6's Keras
# compile has no jit_compile argument
no_xla = {"jit_compile": False} if hasattr(tf.keras.optimizers, "LossScaleOptimizer") else {}
model.compile(optimizer=npu.train.optimizer.NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.01)),
              loss="mse", **no_xla)
rng = np.random.default_rng(0)
x, y = rng.standard_normal((4, 4)).astype(np.float32), np.ones((4, 1), np.float32)
for _ in range(2):
    model.train_on_batch(x, y)
print(json.dumps({"policy": tf.keras.mixed_precision.experimental.global_policy().name,
                  "carried": carried, "compute_dtype": model.layers[0].compute_dtype,
                  "steps": 2}))
tf.keras.mixed_precision.experimental.set_policy("float32")
