"""Shim of ``npu_bridge.helper.helper``: ``get_gen_ops()`` gives the emulated float-status ops."""
from npu_loss_scale import emulation

_EMULATED = ("npu_alloc_float_status", "npu_get_float_status", "npu_clear_float_status",
             "npu_get_float_status_v2", "npu_clear_float_status_v2")


class _GenOps:
    """The emulated float-status ops under their npu_bridge names; other device ops are absent."""

    def __init__(self):
        for name in _EMULATED:
            setattr(self, name, getattr(emulation, name))

    def __getattr__(self, name):
        raise AttributeError(
            "npu_bridge op %r is not emulated on CPU by npu_loss_scale; the shim provides only the "
            "float-status ops: %s" % (name, ", ".join(_EMULATED)))


_gen_ops = _GenOps()


def get_gen_ops():
    """The op library of the adapter: here, the emulated float-status ops."""
    return _gen_ops


version = "npu_loss_scale CPU shim"
