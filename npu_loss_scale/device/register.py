"""CPU emulation of the Ascend float-status register and of saturation-mode arithmetic.

On an Atlas training device (Ascend 910) running in *saturation mode*, an overflowing result
becomes the extreme value of its dtype (±65504 for float16, ±3.4028235e38 for float32) and NaN
becomes 0. Nothing in the tensors says so; the device instead sets a sticky, device-global
*float-status register* that must be read and cleared explicitly. This module reproduces both:

* a register with the npu_bridge status-op names (:func:`npu_get_float_status_v2` and friends),
  sticky until cleared, one per graph (and per replica of a ``tf.distribute`` strategy, as each
  device has its own), not saved in checkpoints and needing no initialisation;
* :func:`saturate`, which applies saturation to a tensor on the forward pass and to the gradient
  flowing back through it, and records every overflow in the register
  (:mod:`npu_loss_scale.device.saturation` applies it to whole models);
* the overflow-mode switch (:func:`set_device_sat_mode`, :func:`get_device_sat_mode`,
  :func:`is_inf_nan_enabled`): in INF/NaN mode ``saturate`` leaves IEEE results alone.

Example::

    import tensorflow as tf
    from npu_loss_scale import emulation
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        y = emulation.saturate(tf.cast([1e5, -1e5, float("nan"), 3.0], tf.float16))
        print(sess.run(y))                                     # [65504. -65504. 0. 3.]
        print(sess.run(emulation.npu_get_float_status_v2()))   # [1 1 0 0 0 0 0 0]
        sess.run(emulation.npu_clear_float_status_v2())
        print(sess.run(emulation.npu_get_float_status_v2()))   # [0 0 0 0 0 0 0 0]

The pieces: the register's words and slots are :mod:`npu_loss_scale.device.float_status`, the
saturation arithmetic :mod:`npu_loss_scale.device.saturate`, the sites noted in INF/NaN mode
:mod:`npu_loss_scale.device.ieee_sites`; this module is the device's face (mode switch, status
ops, :func:`saturate`), and ``npu_loss_scale.emulation`` is this module.

Register words: word 0 is set when a value overflowed to ±MAX, word 1 when a NaN was replaced
by 0; the other six stay 0. "All eight words zero" means "no overflow since the last clear",
exactly as on the device.

**When the real device is in use** (the detection backend is ``npu`` and the real ``npu_bridge``
imports), the mode functions are routed to ``npu_bridge.estimator.npu.npu_plugin`` so the
device's own setting is the one that counts, and :func:`saturate` is the identity: the hardware
saturates by itself and its register is the real one. The same model code thus runs on CPU with
emulation and on the device without it.
"""
import os

import tensorflow as tf

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal import probe
from npu_loss_scale.device import float_status
from npu_loss_scale.device import ieee_sites
from npu_loss_scale.device import localisation
from npu_loss_scale.device import saturate as saturate_lib
from npu_loss_scale.device.float_status import (  # noqa: F401  (the register's names, here too)
    READER_SLOTS, STATUS_WORDS, _state_of, allocate_reader_slot, clear_slot, read_slot, record,
    reset_register)
from npu_loss_scale.device.saturate import _saturate, building_internals  # noqa: F401

SATURATION = 0
INF_NAN = 1
MODE_ENV_VAR = "NPU_LOSS_SCALE_SAT_MODE"

_as_is = _graphs.as_is

_mode = None


# -- overflow mode -------------------------------------------------------------------------------
MODE_NAMES = {"saturation": SATURATION, "inf_nan": INF_NAN}


def _initial_mode():
    """The mode ``$NPU_LOSS_SCALE_SAT_MODE`` names, by number or name; saturation if unset."""
    raw = os.environ.get(MODE_ENV_VAR)
    if raw is None or raw.strip() == "":
        return SATURATION
    value = MODE_NAMES.get(raw.strip().lower())
    if value is None:
        try:
            value = int(raw)
        except ValueError:
            value = None
    if value not in (SATURATION, INF_NAN):
        raise ValueError("environment variable %s must be 0 or saturation, 1 or inf_nan; got %r"
                         % (MODE_ENV_VAR, raw))
    return value


def _device_plugin():
    """``npu_plugin`` of the real npu_bridge when the ``npu`` backend is active, else None."""
    return probe.active_device_plugin()


def _emulated_mode():
    global _mode
    if _mode is None:
        _mode = _initial_mode()
    return _mode


@_as_is
def set_device_sat_mode(mode):
    """Selects the overflow mode: 0 = saturation (the Atlas-training default), 1 = INF/NaN.

    Like the device setting, it is per process and is read when graphs are built: set it before
    building the model. On the device (backend ``npu``) the call goes to
    ``npu_bridge.estimator.npu.npu_plugin.set_device_sat_mode`` as well. Returns the previous mode.

    Example::

        previous = set_device_sat_mode(1)      # INF/NaN: saturate() leaves inf and NaN alone
        set_device_sat_mode(previous)
    """
    global _mode
    if isinstance(mode, bool) or mode not in (SATURATION, INF_NAN):
        raise ValueError("mode must be 0 (saturation) or 1 (INF/NaN); got %r" % (mode,))
    plugin = _device_plugin()
    previous = _mode_of(plugin)
    _mode = int(mode)
    if plugin is not None:
        plugin.set_device_sat_mode(int(mode))
    return previous


def _mode_of(plugin):
    if plugin is not None:
        return INF_NAN if plugin.is_inf_nan_enabled() else SATURATION
    return _emulated_mode()


@_as_is
def get_device_sat_mode():
    """The current overflow mode: 0 = saturation, 1 = INF/NaN (the device's, on backend npu)."""
    return _mode_of(_device_plugin())


@_as_is
def is_inf_nan_enabled():
    """True in INF/NaN mode (IEEE results), False in saturation mode."""
    return get_device_sat_mode() == INF_NAN


# -- the npu_bridge status ops -------------------------------------------------------------------
@_as_is
def npu_get_float_status_v2(name=None):
    """Reads the register: an int32[8] tensor, all zero when nothing overflowed since the clear.

    As with the device op, ordering is the caller's: build it under
    ``tf.control_dependencies(gradients)`` to read after the gradients exist.
    """
    return read_slot(0, name=name or "npu_get_float_status_v2")


@_as_is
def npu_clear_float_status_v2(name=None):
    """Clears the register (all eight words to zero, for every reader). Returns the op.

    With overflow localisation on, the sites noted so far are discarded with it.
    """
    return float_status.clear_all(name or "npu_clear_float_status_v2")


@_as_is
def npu_alloc_float_status(name=None):
    """Allocates a status buffer for the v1 protocol: float32[8] zeros (the register is untouched)."""
    return tf.zeros([STATUS_WORDS], tf.float32, name=name or "npu_alloc_float_status")


@_as_is
def npu_get_float_status(x, name=None):
    """v1 protocol: reads the register into a buffer shaped like ``x`` (float32), after ``x``."""
    x = tf.convert_to_tensor(x, tf.float32)
    with tf.control_dependencies([x]):
        words = tf.cast(npu_get_float_status_v2(), tf.float32)
        return tf.reshape(words, tf.shape(x), name=name or "npu_get_float_status")


@_as_is
def npu_clear_float_status(x, name=None):
    """v1 protocol: clears the register after ``x``; returns zeros shaped like the buffer ``x``."""
    x = tf.convert_to_tensor(x, tf.float32)
    with tf.control_dependencies([x]):
        cleared = npu_clear_float_status_v2()
    with tf.control_dependencies([cleared]):
        return tf.zeros_like(x, name=name or "npu_clear_float_status")


# -- saturate --------------------------------------------------------------------------------------
@_as_is
def saturate(x, name=None):
    """Applies Ascend saturation-mode arithmetic to ``x`` and to the gradient flowing back.

    In saturation mode (the default): values beyond the dtype's range become ±MAX of the dtype
    (±65504 for float16), NaN becomes 0, and each such event — on the forward value or on the
    gradient during backpropagation — sets the emulated float-status register. In INF/NaN mode
    (``set_device_sat_mode(1)``), and on the real device (backend ``npu``, which saturates by
    itself), ``x`` and its gradient pass through unchanged.

    Place it where the device would saturate: after every float16 op, or at least after the ops
    that can overflow. :mod:`npu_loss_scale.device.saturation` does that for a layer, a function or
    every float16 op of a graph you build.

    Example::

        y = saturate(tf.cast([1e5, -1e5, float("nan"), 3.0], tf.float16))
        # y == [65504, -65504, 0, 3], and npu_get_float_status_v2() is now non-zero
    """
    x = tf.convert_to_tensor(x)
    saturate_lib.check_floating("x", x)
    if _localising_ieee():
        with tf.name_scope(name or "saturate"):
            return ieee_sites.note_ieee(x)
    if _device_plugin() is not None or is_inf_nan_enabled():
        return tf.identity(x, name=name)
    return _saturate(x, name=name)


def round_to_float16(x, name=None):
    """``x`` as a float16 op's output on the device, kept in ``x``'s dtype: rounded to float16
    precision (to nearest, ties to even) and, in saturation mode, saturated — an overflow becomes
    ±65504 and sets the float-status register, NaN becomes 0 — and the gradient flowing back is
    rounded and saturated the same way. In INF/NaN mode, and on the real device, only rounded.

    What the precision emulation does to a cube op's operands and results, for models that
    compute in float32 and round where the device would hold a float16 tensor (float32 kernels
    are several times faster than float16 ones on a CPU). One pass over ``x`` when the package's
    kernels are built (:mod:`npu_loss_scale._internal.kernels`). A float16 ``x`` is
    :func:`saturate` d.

    Example::

        y = round_to_float16(tf.constant([1.0001, 7e4], tf.float32))
        # y == [1.0, 65504.0] (float32), and npu_get_float_status_v2() is now non-zero
    """
    x = tf.convert_to_tensor(x)
    saturate_lib.check_floating("x", x)
    if x.dtype == tf.float16:
        return saturate(x, name=name)
    # the fused rounding on the emulation (saturating or, in INF/NaN mode, not) where the
    # package's kernels are loaded; else a Cast, saturate() and a Cast back
    if x.dtype == tf.float32 and _device_plugin() is None:
        fused = saturate_lib.round_half(x, saturating=not is_inf_nan_enabled())
        if fused is not None:
            return fused if name is None else tf.identity(fused, name=name)
    return tf.cast(saturate(tf.cast(x, tf.float16)), x.dtype, name=name)


def _localising_ieee():
    """True while building a graph in INF/NaN mode with overflow localisation on (emulation)."""
    return (localisation.enabled() and is_inf_nan_enabled() and _device_plugin() is None
            and not tf.executing_eagerly())


__all__ = ["saturate", "round_to_float16", "set_device_sat_mode", "get_device_sat_mode", "is_inf_nan_enabled",
           "npu_alloc_float_status", "npu_get_float_status", "npu_clear_float_status",
           "npu_get_float_status_v2", "npu_clear_float_status_v2", "record",
           "reset_register", "READER_SLOTS", "SATURATION", "INF_NAN", "STATUS_WORDS",
           "MODE_ENV_VAR"]
