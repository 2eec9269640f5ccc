"""Shim of ``npu_device.npu_device``, the module the adapter's package re-exports from (scripts
write ``from npu_device.npu_device import gen_npu_ops``): the same objects as the package."""
from npu_bridge._shim import module_getattr as _module_getattr
from npu_device import gen_npu_ops, global_npu_ctx, global_options, open  # noqa: F401  pylint: disable=redefined-builtin

__all__ = ["open", "global_options", "global_npu_ctx", "gen_npu_ops"]
__getattr__ = _module_getattr(__name__, __all__)
