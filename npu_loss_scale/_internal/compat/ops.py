"""Ops whose TensorFlow 1.x API means something else than the 2.x one.

* ``where(condition, x, y)``: 2.x broadcasts the three arguments; 1.15's ``tf.where`` is the v1
  op (same shapes, or a vector condition picking rows), and its broadcasting form is
  ``tf.compat.v2.where``.
"""
import tensorflow as tf

# 1.15's tf.where is the v1 op (asking for tf.where_v2 there logs a deprecation warning).
where = tf.compat.v2.where if tf.where is tf.compat.v1.where else tf.where
