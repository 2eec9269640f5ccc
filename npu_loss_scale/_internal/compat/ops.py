"""Ops whose TensorFlow 1.x API means something else than the 2.x one.

* ``where(condition, x, y)``: 2.x broadcasts the three arguments; 1.15's ``tf.where`` is the v1
  op (same shapes, or a vector condition picking rows), and its broadcasting form is
  ``tf.compat.v2.where``.
* ``clip_by_global_norm(...)``: ``tf.clip_by_global_norm``; 1.15's calls its own deprecated
  ``tf.where`` and logs "where ... is deprecated" for a call the caller did not make, muted there
  the way TensorFlow mutes its own internal calls (``deprecation.silence``).
* ``executing_eagerly_outside_functions()``: whether code outside any ``tf.function`` runs
  eagerly; TensorFlow 2 exports it as ``tf.compat.v1.executing_eagerly_outside_functions``,
  1.15 has it only in ``tensorflow.python.framework.ops``.
"""
import tensorflow as tf
from tensorflow.python.framework.ops import executing_eagerly_outside_functions
from tensorflow.python.util import deprecation

# 1.15's tf.where is the v1 op (asking for tf.where_v2 there logs a deprecation warning).
where = tf.compat.v2.where if tf.where is tf.compat.v1.where else tf.where


def clip_by_global_norm(*args, **kwargs):
    """``tf.clip_by_global_norm(*args, **kwargs)``, without 1.15's notice about its own call."""
    if tf.where is tf.compat.v1.where:    # 1.15
        with deprecation.silence():
            return tf.clip_by_global_norm(*args, **kwargs)
    return tf.clip_by_global_norm(*args, **kwargs)


__all__ = ["clip_by_global_norm", "executing_eagerly_outside_functions", "where"]
