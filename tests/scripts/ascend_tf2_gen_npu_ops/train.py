"""A TF2 training script in the shape of Ascend's ModelZoo TF2 models (written for this test):
opens npu_device, makes Keras Dropout the device's dropout through a vendored npu_ops.py, uses
the device's FastGelu, and trains a few steps with Keras ``fit`` and with a ``tf.function``
step through npu_device's NpuLossScaleOptimizer. Prints JSON lines for the test to check."""
import json
import random

import numpy as np
import tensorflow as tf

import npu_device
from npu_device.train.optimizer import NpuLossScaleOptimizer

npu_device.open().as_default()

import npu_convert_dropout  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import
import npu_ops  # noqa: E402  pylint: disable=wrong-import-position
from gelu import fast_gelu  # noqa: E402  pylint: disable=wrong-import-position


def emit(**fields):
    print(json.dumps(fields), flush=True)


# the gradient through dropout: 1/keep_prob where kept, 0 where dropped
KEEP = 0.75
probe = tf.Variable(tf.random.normal([6, 50], seed=1))


@tf.function
def dropout_and_grad(v):
    with tf.GradientTape() as tape:
        out = npu_ops.dropout(v, KEEP)
    return out, tape.gradient(out, v)


@tf.function
def dropout_v3_and_grad(v):
    with tf.GradientTape() as tape:
        out = npu_ops.dropout_v3(v, KEEP)
    return out, tape.gradient(out, v)


def grad_report(kind, fn):
    out, grad = (t.numpy() for t in fn(probe))
    kept = out != 0
    emit(event="grad", kind=kind, kept_fraction=float(kept.mean()),
         out_ok=bool(np.allclose(out, np.where(kept, probe.numpy() / KEEP, 0.0), rtol=1e-6)),
         grad_ok=bool(np.allclose(grad, np.where(kept, 1.0 / KEEP, 0.0), rtol=1e-6)))


grad_report("dropout", dropout_and_grad)
grad_report("dropout_v3", dropout_v3_and_grad)

x = tf.constant(np.linspace(-3, 3, 7, dtype=np.float32))
with tf.GradientTape() as tape:
    tape.watch(x)
    y = fast_gelu(x)
emit(event="fast_gelu", y=y.numpy().tolist(), dy=tape.gradient(y, x).numpy().tolist())

# Keras fit: Dropout is npu_ops.dropout now
rng = np.random.default_rng(0)
features = rng.standard_normal((64, 8)).astype(np.float32)
labels = (features[:, :1] - features[:, 1:2]).astype(np.float32)
if hasattr(tf.keras.utils, "set_random_seed"):
    tf.keras.utils.set_random_seed(3)
else:  # Keras 2.6 (TensorFlow 2.6.5) has no set_random_seed; this is what it sets there
    random.seed(3)
    np.random.seed(3)
    tf.random.set_seed(3)
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(32, activation="relu"),
                             tf.keras.layers.Dropout(0.5), tf.keras.layers.Dense(1)])
model.compile(optimizer=NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.05)), loss="mse")
history = model.fit(features, labels, batch_size=16, epochs=3, verbose=0)
emit(event="fit", losses=[float(v) for v in history.history["loss"]])

# a tf.function training step with the device's dropout and FastGelu
dense1 = tf.keras.layers.Dense(32)
dense2 = tf.keras.layers.Dense(1)
opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.05))
KERAS2 = hasattr(opt, "get_scaled_loss")  # the scripts' Keras; Keras 3 (TF 2.16+) scales differently


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as step_tape:
        hidden = npu_ops.dropout(fast_gelu(dense1(xb)), 0.8)
        loss = tf.reduce_mean(tf.square(dense2(hidden) - yb))
        if KERAS2:
            scaled = opt.get_scaled_loss(loss)
        else:
            scaled = opt.scale_loss(loss)  # Keras 3: apply_gradients unscales
    variables = dense1.trainable_variables + dense2.trainable_variables
    grads = step_tape.gradient(scaled, variables)
    if KERAS2:
        grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, variables))
    return loss


losses = [float(train_step(features, labels)) for _ in range(20)]
emit(event="custom", first=losses[0], last=losses[-1],
     all_finite=bool(np.all(np.isfinite(losses))))
