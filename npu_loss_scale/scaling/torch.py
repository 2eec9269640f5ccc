"""The growth/backoff rule of torch's ``GradScaler`` and Keras's loss-scale optimizers, once.

:func:`next_state` is the rule as one pure tensor function: no variable is read or written, the
caller assigns what it returns. :class:`~npu_loss_scale.GradScaler` calls it with torch's
parameters, both Keras ``NpuLossScaleOptimizer`` classes (:mod:`npu_loss_scale.frontends.keras`)
with Keras's. Its pure NumPy twin, written from the documented rule and sharing no code with this
module, is :mod:`npu_loss_scale.scaling.reference.torch`.

The rule, for one step::

    if not finite:                                  # the step overflowed
        scale = max(scale * backoff_factor, min_scale)
        count = 0
    else:
        count = count + 1
        if count == growth_interval:                # or >= with at_or_past=True
            if scale * growth_factor is finite:     # never grows to inf
                scale = scale * growth_factor
            count = 0

The two families' parameters:

============  ============  ==============  ==========  ======================================
front end     growth        backoff         min_scale   growth point
============  ============  ==============  ==========  ======================================
GradScaler    user's (2)    user's (0.5)    2**-126     ``count == growth_interval`` (torch's:
                                                        a count already past it never grows)
Keras 2 / 3   2             0.5             1           ``count >= dynamic_growth_steps``
============  ============  ==============  ==========  ======================================

``min_scale`` 2**-126 is float32's smallest normal number: a subnormal scale is flushed to zero
by CPU kernels. Keras's own classes differ where the package keeps the scale finite (Keras 3's
doubles to inf); docs/keras.md and docs/grad_scaler.md say what each front end keeps.
"""
import tensorflow as tf

from npu_loss_scale._internal.compat.ops import where

__all__ = ["next_state"]


def next_state(scale, count, finite, *, growth_factor, backoff_factor, growth_interval,
               min_scale, at_or_past=False):
    """(scale, count) after one step (see the module docstring for the rule).

    Args:
      scale: the loss scale, a float32 scalar (tensor or variable).
      count: the finite steps since the last growth or overflow, an integer scalar of any dtype;
        the returned count has its dtype.
      finite: bool scalar, True when the step's gradients were all finite.
      growth_factor, backoff_factor: the factors (numbers or scalar tensors).
      growth_interval: finite steps in a row before a growth (number or integer scalar tensor).
      min_scale: a backoff never goes below it (a number).
      at_or_past: grow when the count reaches *or passes* ``growth_interval`` (Keras), not only
        when it equals it (torch).
    """
    scale = tf.convert_to_tensor(scale)
    count = tf.convert_to_tensor(count)
    overflow = tf.logical_not(finite)
    counted = count + tf.ones_like(count)
    interval = tf.cast(growth_interval, count.dtype)
    reached = tf.greater_equal(counted, interval) if at_or_past else tf.equal(counted, interval)
    grow = tf.logical_and(tf.logical_not(overflow), reached)
    grown = scale * tf.cast(growth_factor, scale.dtype)
    backed_off = tf.maximum(scale * tf.cast(backoff_factor, scale.dtype),
                            tf.constant(min_scale, scale.dtype))
    new_scale = where(overflow, backed_off,
                      where(tf.logical_and(grow, tf.math.is_finite(grown)), grown, scale))
    new_count = where(tf.logical_or(overflow, grow), tf.zeros_like(count), counted)
    return new_scale, new_count
