"""What the tests expect of the Keras that ``tf.keras`` is, written once.

Keras 2.6 (TF 2.6.5, Ascend's TF2 adapter's TensorFlow): ``tf.keras.optimizers`` are the
``OptimizerV2`` family, so the package's ``NpuLossScaleOptimizer`` is itself the class around
them, and ``Model.compile`` has no ``jit_compile``. Keras 2.11-2.15: the ``OptimizerV2`` family is
``tf.keras.optimizers.legacy`` and gets ``NpuLegacyLossScaleOptimizer``. Keras 3: no
``OptimizerV2`` at all.
"""
import inspect

import tensorflow as tf

from npu_loss_scale._internal.compat import keras as compat_keras

KERAS3 = compat_keras.is_keras3()
OPTIMIZER_V2_ONLY = not KERAS3 and compat_keras.keras2_classes().optimizer is None
NO_LEGACY_REASON = "Keras 3 has no legacy (OptimizerV2) optimizers"
# Keras 2.6 has one optimizer family (OptimizerV2): no legacy/new split to convert between
NO_SPLIT_REASON = ("Keras 2.6 has no legacy/new optimizer split (OptimizerV2 only): "
                   "convert_to_legacy_optimizer does not exist there")

# where OptimizerV2 optimizers are, as source text (for scripts run in a subprocess) and as a module
LEGACY_OPTIMIZERS = "tf.keras.optimizers" if OPTIMIZER_V2_ONLY else "tf.keras.optimizers.legacy"
# the class NpuLossScaleOptimizer(an OptimizerV2 optimizer) gives
LEGACY_CLASS_NAME = "NpuLossScaleOptimizer" if OPTIMIZER_V2_ONLY else "NpuLegacyLossScaleOptimizer"
# Model.compile's arguments that keep the emulated register's hash table out of XLA
NO_JIT = ({"jit_compile": False}
          if "jit_compile" in inspect.signature(tf.keras.Model.compile).parameters else {})


def legacy_optimizers():
    """The module of Keras's ``OptimizerV2`` optimizers (Keras 2 only)."""
    return tf.keras.optimizers if OPTIMIZER_V2_ONLY else tf.keras.optimizers.legacy


def optimizer_variables(opt):
    """An optimizer's variables as a list: a method of ``OptimizerV2`` (Keras 2.6 and the legacy
    family), a property of Keras 2.11+'s new optimizers and of Keras 3's."""
    variables = opt.variables
    return list(variables() if callable(variables) else variables)


def custom_step(opt, var, loss_fn):
    """One step of a custom loop, in the form the Keras version documents."""
    with tf.GradientTape() as tape:
        loss = loss_fn()
        scaled = opt.scale_loss(loss) if KERAS3 else opt.get_scaled_loss(loss)
    grads = tape.gradient(scaled, [var])
    if not KERAS3:
        grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(list(zip(grads, [var])))
