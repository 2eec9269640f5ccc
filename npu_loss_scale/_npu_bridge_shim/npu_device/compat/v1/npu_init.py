"""Shim of ``npu_device.compat.v1.npu_init``: the names of ``npu_bridge.npu_init``."""
from npu_bridge import npu_init as _npu_init

# ``tf`` and the Keras callback resolve when asked for (see npu_bridge.npu_init)
globals().update({n: getattr(_npu_init, n) for n in _npu_init.__all__
                  if n not in ("tf", "NPUBroadcastGlobalVariablesCallback")})
__all__ = list(_npu_init.__all__)


def __getattr__(name):
    return getattr(_npu_init, name)  # ``tf``: the importing script's own (see npu_bridge.npu_init)
