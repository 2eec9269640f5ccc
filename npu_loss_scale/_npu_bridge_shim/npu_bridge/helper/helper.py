"""Shim of ``npu_bridge.helper.helper``: ``get_gen_ops()`` gives the adapter's op library as far
as it is emulated: the float-status ops (:mod:`npu_loss_scale.device.register`) and the device kernels
shared with ``npu_device.gen_npu_ops`` (dropout masks, FastGelu:
:mod:`npu_loss_scale.ascend.device_kernels`)."""
from npu_loss_scale.device import register as emulation

_FLOAT_STATUS = ("npu_alloc_float_status", "npu_get_float_status", "npu_clear_float_status",
                 "npu_get_float_status_v2", "npu_clear_float_status_v2")
_KERNELS = ("drop_out_gen_mask", "drop_out_do_mask", "drop_out_gen_mask_v3",
            "drop_out_do_mask_v3", "fast_gelu", "fast_gelu_grad")


class _GenOps:
    """The emulated ops under their npu_bridge names; other device ops are absent."""

    def __init__(self):
        for name in _FLOAT_STATUS:
            setattr(self, name, getattr(emulation, name))

    def __getattr__(self, name):
        if name in _KERNELS:  # imported on first use: the module needs TensorFlow
            from npu_loss_scale.ascend import device_kernels  # pylint: disable=import-outside-toplevel
            value = getattr(device_kernels, name)
            setattr(self, name, value)
            return value
        raise AttributeError(
            "npu_bridge op %r is not emulated on CPU by npu_loss_scale; the shim provides only "
            "the float-status ops (%s) and the device kernels %s"
            % (name, ", ".join(_FLOAT_STATUS), ", ".join(_KERNELS)))


_gen_ops = _GenOps()


def get_gen_ops():
    """The op library of the adapter: here, the emulated float-status ops and device kernels."""
    return _gen_ops


version = "npu_loss_scale CPU shim"
