"""Shim of ``npu_bridge.estimator.npu_ops``: the device ops scripts call, computed on CPU.

* ``dropout(x, keep_prob, noise_shape=None, seed=None, name=None)``: keeps each element with
  probability ``keep_prob`` and scales it by ``1 / keep_prob`` (the device's gen-mask/do-mask
  pair); graph mode only, as on the device; ``keep_prob`` must be in (0, 1], and 1.0 returns
  ``x`` unchanged.
* ``initialize_system()`` / ``shutdown_system()``: ops with nothing to do on CPU (no device to
  open or close), so ``sess.run`` of them works.
"""
import numbers

import tensorflow as tf

from npu_bridge._shim import module_getattr as _module_getattr


def dropout(x, keep_prob, noise_shape=None, seed=None, name=None):
    """``x`` with elements dropped with probability ``1 - keep_prob``, kept ones scaled."""
    if tf.executing_eagerly():
        raise RuntimeError("npu_ops.dropout builds a graph op, as on the device; it is not "
                           "available in eager execution (use it in a tf.compat.v1 graph or "
                           "a tf.function)")
    with tf.compat.v1.name_scope(name, "npu_dropout", [x]) as scope:
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
        keep = tf.cast(keep_prob, x.dtype)
        shape = tf.shape(x) if noise_shape is None else noise_shape
        uniform = tf.random.uniform(shape, dtype=x.dtype, seed=seed)
        mask = tf.cast(uniform < keep, x.dtype)
        return tf.math.multiply(x * mask, tf.math.reciprocal(keep), name=scope)


def initialize_system(name=None):
    """An op that opens the device: nothing to do on CPU."""
    return tf.no_op(name=name or "npu_initialize_system")


def shutdown_system(name=None):
    """An op that closes the device: nothing to do on CPU."""
    return tf.no_op(name=name or "npu_shutdown_system")


__all__ = ["dropout", "initialize_system", "shutdown_system"]
__getattr__ = _module_getattr(__name__, __all__)
