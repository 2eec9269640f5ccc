"""Which detection backend applies, and whether a real ``npu_bridge`` is there to use.

The one place that probes for Huawei's ``npu_bridge`` (the CPU shim of ``python -m
npu_loss_scale.emulate`` does not count as real) and reads ``NPU_LOSS_SCALE_BACKEND``. The
emulated register routes its mode functions through :func:`active_device_plugin` on the device;
detection and agreement ask :func:`get_backend_name`. Imports nothing of the package but checks
and graphs (for :data:`~npu_loss_scale._internal.graphs.as_is`).

It is also the one module below the Ascend layer that names the adapter's modules
(``npu_bridge.helper.helper``, ``npu_bridge.estimator.npu.npu_plugin``,
``npu_bridge.hccl.hccl_ops``): the layers above ask it for them. Where the emulator has put its
shim in the adapter's place (``ascend/shim.py``, a layer above), the installer hands this module
the function that imports the shim's modules (:func:`use_stand_in`), so no layer below the shim
imports the shim itself.
"""
import importlib
import os
import sys
import threading

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import graphs as _graphs

_as_is = _graphs.as_is

ENV_VAR = "NPU_LOSS_SCALE_BACKEND"
"""The environment variable naming the detection backend where no ``backend=`` argument does
(exported by the package as ``BACKEND_ENV_VAR``)."""
BACKEND_NAMES = ("npu", "emulation", "inf_nan")
"""The detection backends: ``npu`` reads the device's float-status register through npu_bridge,
``emulation`` its CPU emulation (plus IEEE infs and NaNs of the gradients), ``inf_nan`` only the
IEEE infs and NaNs."""


# -- npu_bridge access (lazy) --------------------------------------------------------------------
SHIM_MARKER = "__npu_loss_scale_shim__"

_probe_lock = threading.Lock()
_probe = {"key": None, "available": False}


_stand_in = {"import": None}


def use_stand_in(import_module):
    """``import_module(name)`` imports the adapter's modules from now on (the emulator's shim,
    handed down by the layer that installed it); None: Python's import again."""
    _stand_in["import"] = import_module


def _import(name):
    return (_stand_in["import"] or importlib.import_module)(name)


def is_shim(module):
    """True for the CPU shim package of ``python -m npu_loss_scale.emulate``."""
    return bool(getattr(module, SHIM_MARKER, False))


@_as_is
def npu_bridge_available():
    """True when a real ``npu_bridge`` (or a test stand-in on sys.path) imports.

    The CPU shim installed by ``python -m npu_loss_scale.emulate`` does not count. The answer is
    cached until ``sys.path`` or the imported ``npu_bridge`` module changes.
    """
    key = (tuple(sys.path), id(sys.modules.get("npu_bridge")))
    with _probe_lock:
        if _probe["key"] == key:
            return _probe["available"]
    try:
        _import("npu_bridge.helper.helper")
        available = not is_shim(sys.modules.get("npu_bridge"))
    except ImportError:
        available = False
    key = (tuple(sys.path), id(sys.modules.get("npu_bridge")))
    with _probe_lock:
        _probe["key"], _probe["available"] = key, available
    return available


def npu_bridge_gen_ops():
    """npu_bridge's generated ops (the float-status ops among them); ImportError, saying what to
    use instead, without npu_bridge."""
    try:
        helper = _import("npu_bridge.helper.helper")
    except ImportError as err:
        raise ImportError("backend 'npu' needs npu_bridge (from Huawei's CANN toolkit), which "
                          "did not import: %s. Use backend='emulation' off the device." % err)
    return helper.get_gen_ops()


def npu_bridge_hccl_ops():
    """``npu_bridge.hccl.hccl_ops``, the adapter's collectives (ImportError without npu_bridge)."""
    return _import("npu_bridge.hccl.hccl_ops")


def npu_plugin_module():
    """``npu_bridge.estimator.npu.npu_plugin`` (ImportError without npu_bridge)."""
    return _import("npu_bridge.estimator.npu.npu_plugin")


def npu_is_inf_nan_enabled():
    """The device's overflow mode from npu_plugin: True = INF/NaN, False = saturation."""
    return bool(npu_plugin_module().is_inf_nan_enabled())


@_as_is
def active_device_plugin():
    """npu_plugin of the real npu_bridge when the ``npu`` backend applies, else None.

    :mod:`npu_loss_scale.device.register` routes the overflow-mode functions through it.
    """
    if get_backend_name() != "npu" or not npu_bridge_available():
        return None
    return npu_plugin_module()


@_as_is
def get_backend_name(backend=None):
    """Which detection backend applies: the argument, else $NPU_LOSS_SCALE_BACKEND, else auto.

    Automatic choice: ``npu`` when the real ``npu_bridge`` imports, ``emulation`` otherwise.

    Example::

        get_backend_name()              # 'emulation' on a machine without CANN
        get_backend_name("inf_nan")     # 'inf_nan'
    """
    if backend is not None:
        return _checks.one_of("backend", backend, BACKEND_NAMES)
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        if env not in BACKEND_NAMES:
            raise ValueError("environment variable %s must be one of %s; got %r"
                             % (ENV_VAR, ", ".join(BACKEND_NAMES), env))
        return env
    return "npu" if npu_bridge_available() else "emulation"
