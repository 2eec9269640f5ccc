"""The mutable hash table the package keeps its counters and emulated registers in.

TensorFlow 2.x exports it as ``tf.lookup.experimental.MutableHashTable``; TensorFlow 1.15 has
the same class (``tensorflow.python.ops.lookup_ops``) without that export (1.15 has it only as
``tf.contrib.lookup.MutableHashTable``, which would import all of contrib).
"""
import tensorflow as tf

try:
    MutableHashTable = tf.lookup.experimental.MutableHashTable
except AttributeError:
    from tensorflow.python.ops.lookup_ops import (  # pylint: disable=ungrouped-imports
        MutableHashTable)
