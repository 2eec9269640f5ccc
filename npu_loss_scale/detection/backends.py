"""Overflow detection backends: "did anything overflow since the last clear?"

Three backends answer that question:

``npu``
    The real Ascend float-status ops from ``npu_bridge`` (only inside the CANN toolkit).
``emulation``
    The CPU stand-in of the device register (:mod:`npu_loss_scale.device.register`): overflow recorded
    by :func:`~npu_loss_scale.device.register.saturate` inside the model, and IEEE infs and NaNs (of
    code outside ``saturate``) found in the scaled gradients.
``inf_nan``
    Plain IEEE check: some gradient holds an inf or a NaN (what TensorFlow's own optimizer does).

The backend is chosen by the optimizer's ``backend=`` argument, else the ``NPU_LOSS_SCALE_BACKEND``
environment variable, else automatically: ``npu`` when the real ``npu_bridge`` imports,
``emulation`` otherwise (the CPU shim of ``python -m npu_loss_scale.emulate`` does not count as
real). :func:`get_backend_name` says which one applies.

How each backend takes part in a training step (observe, read, end, clear) is
:mod:`npu_loss_scale.detection.detectors`; which gradient values count as overflowed,
:mod:`npu_loss_scale.detection.flags`. This module chooses the backend.
"""
import tensorflow as tf

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal.probe import (  # noqa: F401  (public here too)
    BACKEND_NAMES, ENV_VAR, SHIM_MARKER, active_device_plugin, get_backend_name, is_shim,
    npu_bridge_available, npu_bridge_gen_ops, npu_is_inf_nan_enabled, npu_plugin_module)
from npu_loss_scale.detection.detectors import (  # noqa: F401  (here too)
    EmulationDetector, InfNanDetector, NpuDetector, OverflowDetector)
from npu_loss_scale.detection.flags import Unscaled, nonfinite_flag  # noqa: F401  (here too)

_as_is = _graphs.as_is


# -- choice ----------------------------------------------------------------------------------------
_FACTORIES = {"npu": NpuDetector, "emulation": EmulationDetector, "inf_nan": InfNanDetector}


@_as_is
def make_detector(backend=None):
    """Builds the detection backend named by :func:`get_backend_name`."""
    if isinstance(backend, OverflowDetector):
        return backend
    return _FACTORIES[get_backend_name(backend)]()


def clear_overflow_status(backend=None, after=None, name="clear_overflow_status"):
    """Clears the overflow status register; evaluation and prediction paths run it.

    The register is sticky from one read of a training step to the next, as on the device, so
    an overflow of an evaluation or prediction run would make the next training step skip. Run
    this after such runs (or fetch it with them: ``after=`` the evaluation's tensors orders the
    clear after them). In graph mode it returns the op (a no-op for ``inf_nan``, which keeps no
    register); in eager mode it clears at once and returns None.

    Example::

        acc = evaluate_tower(...)                       # may overflow in saturation mode
        clear = npu_loss_scale.clear_overflow_status(after=[acc])
        value, _ = sess.run([acc, clear])

    Args:
      backend: ``npu``, ``emulation`` or ``inf_nan``; default :func:`get_backend_name`.
      after: tensors or ops the clear must wait for.
      name: the op's name.
    """
    detector = make_detector(backend)
    deps = [a for a in tf.nest.flatten(after)] if after is not None else []
    with tf.control_dependencies(deps):
        op = detector.clear()
        if op is None:
            op = tf.no_op()
        if tf.executing_eagerly():
            return None
        return tf.group(op, name=name)


__all__ = [
    "BACKEND_NAMES", "ENV_VAR", "get_backend_name", "make_detector", "clear_overflow_status",
    "OverflowDetector", "InfNanDetector", "EmulationDetector", "NpuDetector", "Unscaled",
    "nonfinite_flag", "npu_bridge_available", "is_shim", "SHIM_MARKER",
]
