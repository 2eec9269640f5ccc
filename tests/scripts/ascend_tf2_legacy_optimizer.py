"""A TF2 script in the shape of Ascend's TF2 BERT pre-training (written for TF 2.4): an
``OptimizerV2`` optimizer of its own (a legacy Keras optimizer in TF 2.15 terms, as TensorFlow
Addons' LAMB is), wrapped in npu_device's ``NpuLossScaleOptimizer``, a custom training loop in a
``tf.function`` (``get_scaled_loss``, ``get_unscaled_gradients``, ``apply_gradients``), and the
log line that reads ``optimizer._optimizer._decayed_lr`` and ``optimizer.loss_scale``.

Run through ``python -m npu_loss_scale.emulate [--report FILE] script.py STEPS MODE``. With
``allow_mix_precision`` the dense layers' matmuls compute in float16: at the default scale of
2**15 the second kernel's gradient (about 4.7, so 1.5e5 once scaled) overflows float16, so the
first steps are skipped and the scale halves until it fits (2**13); with ``force_fp32`` nothing
overflows. The weights are NumPy's draws (``KERNEL_SCALE`` times ``default_rng(0)``'s normals,
zero biases), the same on every Keras. Prints one JSON line per step.
"""
import json
import sys

import numpy as np
import tensorflow as tf

import npu_device as npu

KERNEL_SCALE = 0.4


# Keras's OptimizerV2 family: tf.keras.optimizers.legacy on Keras 2.11-2.15, tf.keras.optimizers
# itself on Keras 2.6 (TF 2.6.5)
OPTIMIZER_V2 = getattr(tf.keras.optimizers, "legacy", tf.keras.optimizers)


class AdamWithDecay(OPTIMIZER_V2.Adam):
    """Adam plus decoupled weight decay, written against OptimizerV2 as TF 2.4 code is."""

    def __init__(self, learning_rate, weight_decay_rate=0.01, **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.weight_decay_rate = weight_decay_rate

    def _resource_apply_dense(self, grad, var, apply_state=None):
        lr = self._decayed_lr(var.dtype.base_dtype)
        decay = var.assign_sub(lr * self.weight_decay_rate * var)
        with tf.control_dependencies([decay]):
            return super()._resource_apply_dense(grad, var, apply_state)


npu.global_options().precision_mode = sys.argv[2]
npu.open().as_default()

# weights drawn by NumPy, the same on every Keras (the initialisers' draws differ between releases)
rng = np.random.default_rng(0)
KERNELS = [KERNEL_SCALE * rng.standard_normal((4, 4)), KERNEL_SCALE * rng.standard_normal((4, 1))]
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(4),
                             tf.keras.layers.Dense(1)])
model.set_weights([KERNELS[0], np.zeros(4), KERNELS[1], np.zeros(1)])
optimizer = npu.train.optimizer.NpuLossScaleOptimizer(AdamWithDecay(1e-3))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x = np.full((8, 4), 2.0, np.float32)
y = np.zeros((8, 1), np.float32)
for step in range(int(sys.argv[1])):
    scale = float(optimizer.loss_scale)
    train_step(x, y)
    print(json.dumps({"step": step, "scale_before": scale,
                      "finite": bool(optimizer.last_step_finite.numpy()),
                      "lr": float(optimizer._optimizer._decayed_lr("float32")),
                      "optimizer": type(optimizer).__name__}))
