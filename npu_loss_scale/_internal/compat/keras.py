"""Which Keras ``tf.keras`` is, and where its loss-scale optimizer classes live.

Three generations are met:

* Keras 2.6 (TensorFlow 2.6.5, the release of Ascend's TF2 adapter ``npu_device``): one
  optimizer family, ``OptimizerV2`` (``tf.keras.optimizers.*``), and one
  ``LossScaleOptimizer`` for it.
* Keras 2.11 to 2.15: ``tf.keras.optimizers.*`` are the new optimizers, wrapped by
  ``LossScaleOptimizerV3``; the ``OptimizerV2`` family lives on as
  ``tf.keras.optimizers.legacy`` with the ``LossScaleOptimizer`` of before.
* Keras 3 (TensorFlow 2.16 and later): ``keras.optimizers.LossScaleOptimizer``, no
  ``OptimizerV2``.

In both Keras 2 generations a skipped step still advances the inner optimizer's
``iterations``; Keras 3 counts only applied steps.
"""
import collections
import sys

import tensorflow as tf

Keras2Classes = collections.namedtuple("Keras2Classes", [
    "optimizer", "loss_scale_optimizer", "legacy_optimizer", "legacy_loss_scale_optimizer",
    "dynamic_state"])
Keras2Classes.__doc__ = """Keras 2's loss-scale classes.

``optimizer``/``loss_scale_optimizer``: the new optimizer family and the loss-scale optimizer
for it, both None on Keras 2.6 (which has only ``OptimizerV2``); ``legacy_optimizer``:
``OptimizerV2``; ``legacy_loss_scale_optimizer``: the ``LossScaleOptimizer`` for it;
``dynamic_state``: the dynamic loss-scale state both loss-scale optimizers keep."""


def is_keras3():
    """Whether ``tf.keras`` is Keras 3 (its optimizers have ``LossScaleOptimizer`` beside them)."""
    return hasattr(tf.keras.optimizers, "LossScaleOptimizer")


def has_loss_scale_optimizer():
    """Whether this TensorFlow's Keras has a ``LossScaleOptimizer`` at all (TF 2.4 and later;
    TF 1.15's Keras has none)."""
    return is_keras3() or hasattr(tf.keras.mixed_precision, "LossScaleOptimizer")


def keras2_source_package():
    """The package whose modules ``tf.keras`` is made of, for scripts that import Keras modules
    by path: ``"keras.src"`` on Keras 2.13 to 2.15, ``"keras"`` on Keras 2.6 to 2.12 (where
    ``keras.layers.core`` and the like are still at those paths), None on Keras 3 (laid out
    differently: no path of older Keras maps to it). TensorFlow's own
    ``tensorflow.python.keras`` folder, where 2.6 to 2.15 ship it, is a separate frozen copy
    whose layers do not mix with ``tf.keras`` models, so this is where such paths point."""
    import importlib  # pylint: disable=import-outside-toplevel
    try:
        keras2 = hasattr(tf.compat.v1.keras.backend, "set_session")
        has_src = keras2 and importlib.util.find_spec("keras.src") is not None
    except (ImportError, ValueError):
        return None
    if not keras2:
        return None
    return "keras.src" if has_src else "keras"


def keras2_classes():
    """The :class:`Keras2Classes` of the Keras 2 that ``tf.keras`` is."""
    module = sys.modules[tf.keras.mixed_precision.LossScaleOptimizer.__module__]
    legacy_optimizer = module.optimizer_v2.OptimizerV2
    v3 = getattr(module, "LossScaleOptimizerV3", None)
    return Keras2Classes(
        optimizer=None if v3 is None else tf.keras.optimizers.Optimizer,
        loss_scale_optimizer=v3,
        legacy_optimizer=legacy_optimizer,
        legacy_loss_scale_optimizer=module.LossScaleOptimizer,
        dynamic_state=module._DynamicLossScaleState)  # pylint: disable=protected-access
