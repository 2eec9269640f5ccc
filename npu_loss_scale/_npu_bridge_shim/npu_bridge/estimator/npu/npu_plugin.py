"""Shim of ``npu_bridge.estimator.npu.npu_plugin``: the overflow mode of the emulated device."""
from npu_loss_scale.device import register as emulation


def set_device_sat_mode(mode):
    """0 = saturation (Atlas training default), 1 = INF/NaN; see npu_loss_scale.device.register."""
    emulation.set_device_sat_mode(mode)


def is_inf_nan_enabled():
    return emulation.is_inf_nan_enabled()


def get_device_sat_mode():
    return emulation.get_device_sat_mode()


def npu_close():
    """Nothing to close on CPU."""


def __getattr__(name):
    raise AttributeError("npu_bridge.estimator.npu.npu_plugin.%s is not emulated on CPU by "
                         "npu_loss_scale (the shim provides set_device_sat_mode, "
                         "is_inf_nan_enabled, get_device_sat_mode, npu_close)" % name)
