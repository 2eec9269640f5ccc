"""Shim of ``npu_device.train.optimizer``: ``NpuLossScaleOptimizer`` is the package's Keras one.

``npu_loss_scale.keras.NpuLossScaleOptimizer(inner_optimizer, dynamic=True, initial_scale=None,
dynamic_growth_steps=None)`` has the TF2 adapter's constructor and ``last_step_finite``, and reads
the (emulated) float-status register; Keras is imported only when the name is used.
"""
from npu_bridge._shim import module_getattr as _module_getattr

__all__ = ["NpuLossScaleOptimizer"]
_missing = _module_getattr(__name__, __all__)


def __getattr__(name):
    if name == "NpuLossScaleOptimizer":
        from npu_loss_scale.keras import NpuLossScaleOptimizer  # pylint: disable=import-outside-toplevel
        return NpuLossScaleOptimizer
    return _missing(name)
