"""Ops whose TensorFlow 1.x API means something else than the 2.x one.

* ``where(condition, x, y)``: 2.x broadcasts the three arguments; 1.15's ``tf.where`` is the v1
  op (same shapes, or a vector condition picking rows), and its broadcasting form is
  ``tf.compat.v2.where``.
* ``executing_eagerly_outside_functions()``: whether code outside any ``tf.function`` runs
  eagerly; TensorFlow 2 exports it as ``tf.compat.v1.executing_eagerly_outside_functions``,
  1.15 has it only in ``tensorflow.python.framework.ops``.
"""
import tensorflow as tf
from tensorflow.python.framework.ops import executing_eagerly_outside_functions

# 1.15's tf.where is the v1 op (asking for tf.where_v2 there logs a deprecation warning).
where = tf.compat.v2.where if tf.where is tf.compat.v1.where else tf.where

__all__ = ["executing_eagerly_outside_functions", "where"]
