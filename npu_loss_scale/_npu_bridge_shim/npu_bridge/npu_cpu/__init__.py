"""Shim of ``npu_bridge.npu_cpu``."""
from npu_bridge._shim import module_getattr as _module_getattr

__getattr__ = _module_getattr(__name__, package=True)
