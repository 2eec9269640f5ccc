"""Shim of ``npu_bridge.estimator.npu_unary_ops``: ``npu_unary_ops.gelu`` on CPU.

The device's Gelu computes ``x / (1 + exp(-sqrt(8/pi) * (x + 0.044715 x**3)))``, which is the
tanh approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``: that is what runs here,
in the dtype of ``x``, with TensorFlow's gradient of it.
"""
import math

import tensorflow as tf

from npu_bridge._shim import module_getattr as _module_getattr, not_emulated_message, NotEmulatedError


class _NpuUnaryOps:
    """The ``npu_unary_ops`` object scripts import from this module."""

    @staticmethod
    def gelu(x, name=None):
        with tf.compat.v1.name_scope(name, "Gelu", [x]):
            x = tf.convert_to_tensor(x, name="x")
            if not x.dtype.is_floating:
                raise TypeError("gelu needs a floating-point x; got dtype %s" % x.dtype.name)
            c = tf.cast(math.sqrt(2.0 / math.pi), x.dtype)
            return 0.5 * x * (1.0 + tf.tanh(c * (x + tf.cast(0.044715, x.dtype) * x * x * x)))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotEmulatedError(not_emulated_message(
            "npu_bridge.estimator.npu_unary_ops.npu_unary_ops." + name, ["gelu"]))


npu_unary_ops = _NpuUnaryOps()

__all__ = ["npu_unary_ops"]
__getattr__ = _module_getattr(__name__, __all__)
