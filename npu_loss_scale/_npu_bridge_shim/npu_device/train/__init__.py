"""Shim of ``npu_device.train``: ``optimizer.NpuLossScaleOptimizer`` (the package's Keras
loss-scale optimizer); any other name raises an error saying it is not emulated."""
from npu_bridge._shim import module_getattr as _module_getattr

__getattr__ = _module_getattr(__name__, package=True)
