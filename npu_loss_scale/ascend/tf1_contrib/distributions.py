"""``tf.contrib.distributions.percentile``: TF 1.15's sampled percentile (no distribution classes)."""
import tensorflow as tf


def percentile(x, q, axis=None, interpolation=None, keep_dims=False, validate_args=False,
               name=None):
    """``tf.contrib.distributions.percentile``: the ``q``-th percentile (scalar ``q`` in [0, 100])
    of ``x`` over ``axis`` (all axes when None; a static rank is needed), as TF 1.15 computed it:
    a sample of the sorted values, ``interpolation`` ``"nearest"`` (default, ties to even),
    ``"lower"`` or ``"higher"``; gradients flow to the sampled elements."""
    del validate_args  # TF 1.15 only added assertions on q's range
    interpolation = interpolation or "nearest"
    pick = {"lower": tf.math.ceil, "higher": tf.math.floor, "nearest": tf.math.round}
    if interpolation not in pick:
        raise ValueError("tf.contrib.distributions.percentile: interpolation must be one of "
                         "'lower', 'higher', 'nearest'; got %r" % (interpolation,))
    with tf.name_scope(name or "percentile"):
        x = tf.convert_to_tensor(x)
        ndims = x.shape.ndims
        if ndims is None:
            raise ValueError("tf.contrib.distributions.percentile needs x of a static rank")
        if axis is None:
            axes = list(range(ndims))
        else:
            axes = [int(a) for a in ([axis] if isinstance(axis, int) else list(axis))]
            axes = [a + ndims if a < 0 else a for a in axes]
        front = [i for i in range(ndims) if i not in axes]
        y = tf.transpose(x, front + axes)
        y = tf.reshape(y, tf.concat([tf.shape(y)[:len(front)], [-1]], axis=0))
        count = tf.cast(tf.shape(y)[-1], tf.float32)
        # the index counted from the largest value, as TF 1.15 did (so "lower" rounds it up)
        index = pick[interpolation]((count - 1.0) * (1.0 - tf.cast(q, tf.float32) / 100.0))
        descending = tf.nn.top_k(y, k=tf.shape(y)[-1]).values
        result = tf.gather(descending, tf.cast(index, tf.int32), axis=-1)
        if keep_dims:
            for a in sorted(axes):
                result = tf.expand_dims(result, a)
        return result


__all__ = ["percentile"]
