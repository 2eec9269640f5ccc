"""Shim of ``npu_device.train.optimizer``: ``NpuLossScaleOptimizer`` is the package's Keras one.

``npu_loss_scale.keras.NpuLossScaleOptimizer(inner_optimizer, dynamic=True, initial_scale=None,
dynamic_growth_steps=None)`` has the TF2 adapter's constructor and ``last_step_finite``, and reads
the (emulated) float-status register; Keras is imported only when the name is used. As the
adapter's (TF 2.4/2.6) it takes the optimizers of that time too, legacy ones in TF 2.15 terms
(``tf.keras.optimizers.legacy``, TensorFlow Addons' ``LAMB``...).

With ``python -m npu_loss_scale.emulate --report FILE`` the name gives a subclass that also
counts, in the same report as npu_bridge's ``NPULossScaleOptimizer``, the optimizers built and
each step applied or skipped (a host callback after the step's decision; it changes no value).
"""
from npu_bridge._shim import module_getattr as _module_getattr

__all__ = ["NpuLossScaleOptimizer"]
_missing = _module_getattr(__name__, __all__)
_counting = []


def _counting_class(base):
    """``base`` with the emulate report's counting (built once, on first use)."""
    if _counting:
        return _counting[0]
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_bridge.estimator.npu import npu_loss_scale_optimizer as report  # pylint: disable=import-outside-toplevel

    def count(optimizer):
        finite = optimizer.last_step_finite
        if tf.executing_eagerly():
            report._count_step(bool(finite.numpy()))  # pylint: disable=protected-access
        else:  # read after the step's decision (automatic control dependencies keep the order)
            tf.numpy_function(report._count_step, [tf.convert_to_tensor(finite)], tf.bool,  # pylint: disable=protected-access
                              stateful=True)

    class NpuLossScaleOptimizer(base):  # pylint: disable=abstract-method
        __doc__ = base.__doc__

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            report._note("optimizers_built")  # pylint: disable=protected-access

    if hasattr(base, "stateless_apply"):           # Keras 3: every step goes through apply()
        def apply(self, grads, trainable_variables=None):
            result = base.apply(self, grads, trainable_variables)
            count(self)
            return result
        NpuLossScaleOptimizer.apply = apply
    else:                                          # Keras 2: through apply_gradients()
        def counting_apply_gradients(cls_base):
            def apply_gradients(self, grads_and_vars, *args, **kwargs):
                result = cls_base.apply_gradients(self, grads_and_vars, *args, **kwargs)
                count(self)
                return result
            return apply_gradients
        NpuLossScaleOptimizer.apply_gradients = counting_apply_gradients(base)
        legacy = getattr(base, "_npu_legacy_class", None)
        if legacy is not None:   # NpuLossScaleOptimizer(legacy OptimizerV2 optimizer)
            class NpuLegacyLossScaleOptimizer(legacy):  # pylint: disable=abstract-method
                __doc__ = legacy.__doc__

                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
                    report._note("optimizers_built")  # pylint: disable=protected-access

            NpuLegacyLossScaleOptimizer.apply_gradients = counting_apply_gradients(legacy)
            NpuLegacyLossScaleOptimizer.__module__ = legacy.__module__
            NpuLossScaleOptimizer._npu_legacy_class = NpuLegacyLossScaleOptimizer  # pylint: disable=protected-access
    NpuLossScaleOptimizer.__module__ = base.__module__
    _counting.append(NpuLossScaleOptimizer)
    return NpuLossScaleOptimizer


def __getattr__(name):
    if name == "NpuLossScaleOptimizer":
        from npu_bridge.estimator.npu import npu_loss_scale_optimizer as report  # pylint: disable=import-outside-toplevel
        from npu_loss_scale.keras import NpuLossScaleOptimizer  # pylint: disable=import-outside-toplevel
        if report._report_path() is None:  # pylint: disable=protected-access
            return NpuLossScaleOptimizer
        return _counting_class(NpuLossScaleOptimizer)
    return _missing(name)
