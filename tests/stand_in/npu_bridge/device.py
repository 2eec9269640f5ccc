"""What the device does inside an op (stand-in only): saturate in saturation mode, IEEE otherwise.

npu_loss_scale.device.register.saturate is the identity on the npu backend (the real device saturates
by itself), so the stand-in supplies the device's arithmetic here.
"""
from npu_bridge.estimator.npu import npu_plugin
from npu_loss_scale.device import register as emulation


def device_op(x):
    """The result ``x`` of a device op, as the device leaves it (and its gradient likewise)."""
    if npu_plugin.is_inf_nan_enabled():
        return x
    return emulation._saturate(x)  # pylint: disable=protected-access
