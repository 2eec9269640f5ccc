"""Ascend's Keras ``NpuLossScaleOptimizer`` (TF2 adapter) for Keras 2 (TF 2.6, 2.15) and Keras 3.

``NpuLossScaleOptimizer(inner_optimizer, dynamic=True, initial_scale=None,
dynamic_growth_steps=None)`` is Keras's own loss-scale optimizer with Ascend's overflow
detection: the float-status register (read after the gradients exist, cleared after the read;
its CPU emulation off the device) in saturation mode, where an overflowed value is ±65504 and
``is_finite`` cannot see it, OR-ed with an inf/NaN check of the gradients; plain inf/NaN in
INF/NaN mode or with ``backend="inf_nan"``. With ``is_distributed=True`` the overflow flag is
summed over ranks (:mod:`npu_loss_scale.agreement`, one collective per step) so every rank skips
the same steps. Under a ``tf.distribute`` strategy the flag is first summed over the replicas
(each device has its own register), so an overflow on any replica skips the step everywhere.

What one step does:

* finite step: the inner optimizer applies the unscaled gradients once; with ``dynamic=True``
  the scale doubles after ``dynamic_growth_steps`` finite steps in a row, unless the doubled
  scale would be infinite: it then stays (at most 2**127). That is Keras 2's rule, kept on
  Keras 3 too, whose own class doubles to inf and then skips every step for ever;
* overflowed step: nothing is applied, the scale halves (never below 1) and the count restarts.
  ``dynamic=False``: the scale stays ``initial_scale`` (required), and overflowed steps are
  still skipped (Ascend checks whatever the scale policy).
* ``last_step_finite``: a bool variable, the verdict of the latest step.
* a loss scale that is not a finite number >= 1, or a negative growth counter (what a restored
  checkpoint can hold; the constructor refuses such values), fails the next step before any of
  it runs, with an ``InvalidArgumentError`` naming the variable, its value and what is accepted.
* ``iterations`` follows the Keras version: Keras 2 counts skipped steps too (as the TF2
  adapter does on TF 2.6), Keras 3 only applied ones.

Keras 2 (TF 2.15): ``inner_optimizer`` may also be a legacy one (``OptimizerV2``:
``tf.keras.optimizers.legacy.*``, TensorFlow Addons' optimizers, the ``tf.keras.optimizers`` of
TF 2.4 that the adapter's scripts subclass); the optimizer is then built on Keras's
``LossScaleOptimizer`` for those (class ``NpuLegacyLossScaleOptimizer``, an instance of
``NpuLossScaleOptimizer``), with the same arguments and steps, as Keras's own
``LossScaleOptimizer(optimizer)`` picks its class from the optimizer's kind.

Keras 2.6 (TF 2.6.5, the TensorFlow of Ascend's TF2 adapter): ``tf.keras.optimizers`` are
``OptimizerV2`` ones, and the class is built on Keras's ``LossScaleOptimizer`` for them, as the
adapter's is.

The class is built on first use from the Keras in ``tf.keras`` (Keras's ``LossScaleOptimizer``
on TF 2.6, Keras 2's ``LossScaleOptimizerV3`` on TF 2.15, ``keras.optimizers.LossScaleOptimizer``
on Keras 3; :mod:`npu_loss_scale._internal.compat.keras`), so
importing :mod:`npu_loss_scale` does not import Keras. Keras 3 ``model.fit`` with the emulated
register needs ``jit_compile=False`` (the register is a hash table, which XLA cannot compile).

Example::

    import tensorflow as tf
    from npu_loss_scale.keras import NpuLossScaleOptimizer

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    model.fit(tf.ones([8, 4]), tf.zeros([8, 1]), epochs=1, verbose=0)
    tf.keras.mixed_precision.set_global_policy("float32")
    print(bool(opt.last_step_finite.numpy()))   # True
"""
import tensorflow as tf

from npu_loss_scale._internal.compat import keras as compat_keras
from npu_loss_scale.frontends import _keras2, _keras3
from npu_loss_scale.frontends._keras_shared import DEFAULT_GROWTH_STEPS, DEFAULT_INITIAL_SCALE, \
    register

_built = {}


def __getattr__(name):
    if name == "NpuLossScaleOptimizer":
        if not compat_keras.has_loss_scale_optimizer():
            raise ImportError(
                "npu_loss_scale.keras.NpuLossScaleOptimizer is built on Keras's LossScaleOptimizer, "
                "which this TensorFlow (%s) does not have (TensorFlow 2.4 and later do); in TF1 "
                "Keras, compile the model with optimizer=NPULossScaleOptimizer(...) instead "
                "(docs/guides/keras.md)" % tf.__version__, name="npu_loss_scale.keras")
        if name not in _built:
            version = _keras3 if compat_keras.is_keras3() else _keras2
            _built[name] = register(version.build(__doc__, __name__))
        return _built[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["NpuLossScaleOptimizer", "DEFAULT_INITIAL_SCALE", "DEFAULT_GROWTH_STEPS"]
