"""Shim of ``npu_device.train``: not emulated yet (``optimizer.NpuLossScaleOptimizer`` belongs to
the Keras front end of npu_loss_scale); every name raises an error saying so."""
from npu_bridge._shim import module_getattr as _module_getattr

__getattr__ = _module_getattr(__name__, package=True)
