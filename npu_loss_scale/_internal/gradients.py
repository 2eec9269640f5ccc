"""What a list of gradients holds, seen the same way by every layer.

A gradient list has tensors, ``tf.IndexedSlices`` (whose ``values`` are what can overflow) and
``None`` entries (variables without a gradient). The helpers here say which value tensors such a
list has and whether one of them holds an IEEE inf or NaN; which test decides "this step
overflowed" for a detection backend is :mod:`npu_loss_scale.detection.flags`'s business.
"""
import tensorflow as tf


def values_of(grad):
    """The value tensor of one gradient: an ``IndexedSlices``' ``values``, else the tensor."""
    if isinstance(grad, tf.IndexedSlices):
        return grad.values
    return tf.convert_to_tensor(grad)


def floating_values(grads):
    """The value tensors of the floating-point gradients in ``grads``, in order (None entries
    and integer gradients skipped)."""
    out = []
    for g in grads:
        if g is None:
            continue
        values = values_of(g)
        if values.dtype.is_floating:
            out.append(values)
    return out


def nonfinite(values):
    """bool scalar: ``values`` hold an inf or a NaN (the IEEE test, exact)."""
    return tf.logical_not(tf.reduce_all(tf.math.is_finite(values)))


def all_finite(grads):
    """bool scalar: no gradient in ``grads`` holds an inf or a NaN (True for an empty list)."""
    finite = tf.constant(True)
    for values in floating_values(grads):
        finite = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(values)))
    return finite


__all__ = ["values_of", "floating_values", "nonfinite", "all_finite"]
