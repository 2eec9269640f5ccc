"""An int64 counter in a one-entry hash table: state that needs no initializer.

Used for :attr:`NPULossScaleOptimizer.skipped_steps`. A hash table, not a variable, because:

- scripts that run only ``global_variables_initializer`` (or restore with a plain name-based
  ``Saver``) work: a table needs no initializer and, by default, writes nothing into
  checkpoints;
- a checkpoint written on the device by Ascend's optimizer, which has no such counter, restores
  into a graph that has ours.

With ``checkpoint=True`` (opt-in) the table is saved, under the checkpoint keys
``<name>_table-keys`` and ``<name>_table-values``.
"""
import tensorflow as tf

from npu_loss_scale._internal.compat.lookup import MutableHashTable

__all__ = ["Counter"]


class Counter:
    """An int64 counter kept in a one-entry hash table (see the module docstring)."""

    def __init__(self, name, checkpoint=False):
        with tf.device("/device:CPU:0"):
            self._table = MutableHashTable(
                key_dtype=tf.int64, value_dtype=tf.int64, default_value=0, checkpoint=checkpoint,
                name=name + "_table")
        self.name = name
        self.table = self._table

    def read(self, name=None):
        """The count (int64 scalar)."""
        with tf.device("/device:CPU:0"):
            return tf.identity(self._table.lookup(tf.constant([0], tf.int64))[0], name=name)

    def add(self, delta):
        """Op-returning tensor: the count after adding ``delta`` (int64 scalar)."""
        with tf.device("/device:CPU:0"):
            value = self.read() + tf.cast(delta, tf.int64)
            insert = self._table.insert(tf.constant([0], tf.int64), tf.reshape(value, [1]))
            with tf.control_dependencies([insert]):
                return tf.identity(value)
