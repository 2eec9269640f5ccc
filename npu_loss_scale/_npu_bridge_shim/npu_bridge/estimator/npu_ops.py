"""Shim of ``npu_bridge.estimator.npu_ops``: the device ops scripts call, computed on CPU.

* ``dropout(x, keep_prob, noise_shape=None, seed=None, name=None)``: what the adapter builds, the
  device's mask pair ``drop_out_gen_mask`` + ``drop_out_do_mask`` (shared with
  ``npu_device.gen_npu_ops``, see :mod:`npu_loss_scale.ascend.device_kernels`) with the seeds of
  ``tf.compat.v1.random.get_seed(seed)``: each element is kept with probability ``keep_prob``
  and scaled by ``1 / keep_prob`` (in x's dtype, float16 or float32), the others are 0. Graph
  mode only, as on the device; ``keep_prob`` must be in (0, 1], and 1.0 returns ``x``
  unchanged; a ``noise_shape`` other than x's own shape is refused (the device's ops take one
  mask bit per element of x).
* ``initialize_system()`` / ``shutdown_system()``: ops with nothing to do on CPU (no device to
  open or close), so ``sess.run`` of them works.
"""
import numbers

import tensorflow as tf

from npu_bridge._shim import module_getattr as _module_getattr
from npu_loss_scale.ascend import device_kernels as _kernels


def dropout(x, keep_prob, noise_shape=None, seed=None, name=None):
    """``x`` with elements dropped with probability ``1 - keep_prob``, kept ones scaled."""
    if tf.executing_eagerly():
        raise RuntimeError("npu_ops.dropout builds a graph op, as on the device; it is not "
                           "available in eager execution (use it in a tf.compat.v1 graph or "
                           "a tf.function)")
    x = tf.convert_to_tensor(x, name="x")
    if not x.dtype.is_floating:
        raise ValueError("x must be a floating-point tensor (it is scaled by 1/keep_prob); "
                         "got dtype %s" % x.dtype.name)
    if isinstance(keep_prob, numbers.Real) and not isinstance(keep_prob, bool):
        if not 0 < keep_prob <= 1:
            raise ValueError("keep_prob must be a float in (0, 1] or a scalar tensor; got %r"
                             % (keep_prob,))
        if float(keep_prob) == 1.0:
            return x
    if noise_shape is None:
        shape = tf.shape(x)
    else:
        shape = _kernels.shape_input("npu_ops.dropout", noise_shape)
        known = _kernels.static_shape(shape)
        if known.is_fully_defined() and x.shape.is_fully_defined() and known != x.shape:
            raise ValueError(
                "npu_ops.dropout: noise_shape %s differs from x's shape %s; the device's dropout "
                "ops take one mask bit per element of x, so only x's own shape works (for a "
                "broadcast noise shape use tf.nn.dropout)" % (known, x.shape))
    seed, seed2 = tf.compat.v1.random.get_seed(seed)
    mask = _kernels.drop_out_gen_mask(shape, keep_prob, seed, seed2, name)
    return _kernels.drop_out_do_mask(x, mask, keep_prob, name)


def initialize_system(name=None):
    """An op that opens the device: nothing to do on CPU."""
    return tf.no_op(name=name or "npu_initialize_system")


def shutdown_system(name=None):
    """An op that closes the device: nothing to do on CPU."""
    return tf.no_op(name=name or "npu_shutdown_system")


__all__ = ["dropout", "initialize_system", "shutdown_system"]
__getattr__ = _module_getattr(__name__, __all__)
