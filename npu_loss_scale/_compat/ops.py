"""Ops whose TensorFlow 1.x API means something else than the 2.x one.

* ``where(condition, x, y)``: 2.x broadcasts the three arguments; 1.15's ``tf.where`` is the v1
  op (same shapes, or a vector condition picking rows), and its broadcasting form is
  ``tf.where_v2``.
"""
import tensorflow as tf

where = getattr(tf, "where_v2", tf.where)
