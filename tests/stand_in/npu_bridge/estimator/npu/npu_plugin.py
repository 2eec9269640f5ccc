"""Stand-in of npu_bridge.estimator.npu.npu_plugin: the device's overflow mode, logged."""
import npu_bridge

_MODE = [0]


def set_device_sat_mode(mode):
    npu_bridge.LOG.append(("set_device_sat_mode", mode))
    _MODE[0] = int(mode)


def is_inf_nan_enabled():
    return _MODE[0] == 1
