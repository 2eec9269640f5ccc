"""Megatron's dynamic scale rule with hysteresis, as TensorFlow arithmetic: one update's new
values from the old ones (the rule :class:`~npu_loss_scale.scaling.megatron.DynamicGradScaler`
assigns to its variables; its pure-Python twin is :mod:`npu_loss_scale.scaling.reference.megatron`).

All in float32 (the scale) and int32 (the trackers), element for element as Megatron-Core's
``DynamicGradScaler.update``; ``consecutive`` is DeepSpeed's variant (a finite step refills the
hysteresis), ``ceiling`` caps growth (float32 max when the scaler has no ``max_scale``).
"""
import tensorflow as tf

from npu_loss_scale._internal.compat.ops import where

__all__ = ["dynamic_update"]


def dynamic_update(overflow, scale, growth, hyst, at_min, *, min_scale, ceiling, growth_factor,
                   backoff_factor, growth_interval, hysteresis, consecutive):
    """``(scale, growth_tracker, hysteresis_tracker, min_scale_overflow_steps, stuck_now)``
    after one step whose ``overflow`` (a scalar bool tensor) is given; ``stuck_now``: the step
    overflowed with the scale already at ``min_scale``."""
    f32 = lambda x: tf.constant(x, tf.float32)  # noqa: E731
    i32 = lambda x: tf.constant(x, tf.int32)  # noqa: E731
    min_scale = f32(min_scale)
    ceiling = f32(ceiling)
    # overflowed step
    hyst_spent = hyst - 1
    backed_off = tf.maximum(scale * f32(backoff_factor), min_scale)
    scale_if_inf = where(hyst_spent <= 0, backed_off, scale)
    # finite step
    growth_next = growth + 1
    grow = growth_next >= growth_interval
    grown = tf.minimum(scale * f32(growth_factor), ceiling)
    hyst_if_finite = i32(hysteresis) if consecutive else hyst
    new_scale = where(overflow, scale_if_inf, where(grow, grown, scale))
    new_growth = where(overflow, i32(0), where(grow, i32(0), growth_next))
    new_hyst = where(overflow, hyst_spent, where(grow, i32(hysteresis), hyst_if_finite))
    stuck_now = tf.logical_and(overflow, scale <= min_scale)
    new_at_min = where(stuck_now, at_min + 1, i32(0))
    return new_scale, new_growth, new_hyst, new_at_min, stuck_now
