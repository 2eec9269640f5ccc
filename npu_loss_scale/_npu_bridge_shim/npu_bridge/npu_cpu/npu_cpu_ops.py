"""Shim of ``npu_bridge.npu_cpu.npu_cpu_ops``: the AI-CPU ops scripts call, computed on CPU.

* ``randomchoicewithmask(x, count, seed=0, seed2=0)``: the device's RandomChoiceWithMask. ``x``
  is a bool tensor of rank 1 to 5; the indices of its true elements are shuffled and the first
  ``count`` returned as ``y`` (int32, ``[count, rank]``), padded with zero rows when there are
  fewer, with ``mask`` (bool, ``[count]``) true for the real ones. ``count == 0`` returns every
  true element (shuffled) with an all-true mask. ``count``, ``seed`` and ``seed2`` are op
  attributes, so Python ints. With both seeds 0 the shuffle is random (the graph-level seed
  applies, as for TensorFlow's random ops); otherwise it is the stateless shuffle of
  ``(seed, seed2)``, the same at every run (not the device's random stream).
"""
import numbers

import tensorflow as tf

from npu_bridge._shim import module_getattr as _module_getattr


def _attr_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("randomchoicewithmask: %s is an op attribute, a Python int; got %r"
                        % (name, value))
    return int(value)


def randomchoicewithmask(x, count, seed=0, seed2=0):
    """``(y, mask)``: ``count`` randomly chosen indices of the true elements of ``x``."""
    count, seed, seed2 = (_attr_int("count", count), _attr_int("seed", seed),
                          _attr_int("seed2", seed2))
    if count < 0:
        raise ValueError("randomchoicewithmask: count must be >= 0; got %d" % count)
    with tf.compat.v1.name_scope(None, "RandomChoiceWithMask", [x]):
        x = tf.convert_to_tensor(x, name="x")
        if x.dtype != tf.bool:
            raise TypeError("randomchoicewithmask needs a bool x; got dtype %s" % x.dtype.name)
        rank = x.shape.rank
        if rank is None or not 1 <= rank <= 5:
            raise ValueError("randomchoicewithmask needs x of known rank 1 to 5; got shape %s"
                             % x.shape)
        indices = tf.cast(tf.where(x), tf.int32)
        if seed == 0 and seed2 == 0:
            shuffled = tf.random.shuffle(indices)
        else:
            keys = tf.random.stateless_uniform(tf.shape(indices)[:1], seed=[seed, seed2])
            shuffled = tf.gather(indices, tf.argsort(keys))
        found = tf.shape(shuffled)[0]
        if count == 0:
            return tf.identity(shuffled, name="y"), tf.ones([found], tf.bool, name="mask")
        chosen = shuffled[:count]
        kept = tf.shape(chosen)[0]
        y = tf.pad(chosen, [[0, count - kept], [0, 0]], name="y")
        y.set_shape([count, rank])
        mask = tf.sequence_mask(kept, count, name="mask")
        return y, mask


__all__ = ["randomchoicewithmask"]
__getattr__ = _module_getattr(__name__, __all__)
