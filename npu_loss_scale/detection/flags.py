""""This gradient counts as overflowed": the tests of gradient values, written once.

A detection backend answers "did anything overflow?" from a float-status register, from the
gradients' values, or both. Which test of the values applies is the backend's to say
(:meth:`npu_loss_scale.detection.backends.OverflowDetector.value_test`); the tests themselves are
here, and every front end and optimizer uses them:

``nonfinite``
    The IEEE test: the values hold an inf or a NaN. :func:`nonfinite_flag` is its one-pass form
    over a whole gradient list (a sum per tensor), which can also unscale in the same pass.
``at_max``
    The saturated test: the values hold an inf, a NaN or ±MAX of their dtype, what an overflowed
    op leaves behind in saturation mode. It applies to still-scaled gradients that the emulated
    register may not cover (code outside ``saturate``), where a front end sees only the values.

Flags are float32 scalars (1 = overflowed, 0 = clean) or counts, so they add up across gradient
lists, replicas and ranks; a step overflowed when the sum is not zero.
"""
import tensorflow as tf

# nonfinite, the IEEE test of one tensor, sits with the gradient helpers of layer 0: the loss-scale
# managers' TF LossScale.update (layer 1) uses it too.
from npu_loss_scale._internal.gradients import floating_values, nonfinite, values_of
from npu_loss_scale._internal.graphs import as_is


def at_max(values):
    """bool scalar: ``values`` hold an inf, a NaN or ±MAX of their dtype (a saturated value)."""
    # |g| < MAX is False for ±MAX, ±inf and NaN alike: one comparison covers all three.
    return tf.logical_not(tf.reduce_all(
        tf.less(tf.abs(values), tf.constant(values.dtype.max, values.dtype))))


def count(grads, test):
    """float32 scalar: how many floating gradients of ``grads`` ``test`` finds overflowed (0 when
    ``test`` is None: nothing in the values counts)."""
    flags = [test(values) for values in floating_values(grads)] if test is not None else []
    if not flags:
        return tf.zeros([], tf.float32)
    return tf.reduce_sum(tf.cast(tf.stack(flags), tf.float32))


def check_and_unscale(grads, test, inv_scale, unscale):
    """One pass over ``grads``: (``unscale(g, inv_scale)`` for each, float32 count of overflowed).

    ``grads`` may hold tensors, ``IndexedSlices`` and None (kept); integer gradients pass as they
    are. ``test`` is as for :func:`count`.
    """
    out, flags = [], []
    for g in grads:
        if g is None:
            out.append(None)
            continue
        values = values_of(g)
        if not values.dtype.is_floating:
            out.append(g)
            continue
        if test is not None:
            flags.append(test(values))
        out.append(unscale(g if isinstance(g, tf.IndexedSlices) else values, inv_scale))
    total = (tf.reduce_sum(tf.cast(tf.stack(flags), tf.float32)) if flags
             else tf.zeros([], tf.float32))
    return out, total


class Unscaled:  # pylint: disable=too-few-public-methods
    """What :func:`nonfinite_flag` leaves in ``readers`` for a tensor it also unscaled."""

    def __init__(self, values):
        self.values = values


@as_is   # graph building only (it loads the fused kernel: Python work on files)
def nonfinite_flag(grads, readers=None, reciprocal=None):
    """float32 scalar: 1 when some gradient holds an inf or a NaN, else 0 (None entries ignored).

    One read pass over the gradients and no temporary: each tensor is summed (in float32 or
    float64) and the per-tensor sums are reduced once. An inf or NaN anywhere makes the sum
    non-finite. A sum of finite values overflows only for values around 1e31 and more; such a
    step is skipped too (the loss scale then comes down), which never lets an overflow through.

    ``readers``, when a dict, receives ``{id(values tensor): its sum}``: an op that runs after
    this pass is done with that tensor (the unscaling waits for it, so it is the tensor's last
    reader and TensorFlow can write the unscaled values into the same buffer).

    With ``readers`` and ``reciprocal`` (an :class:`npu_loss_scale.scaling.unscale.Reciprocal`)
    given and the fused kernel available (:mod:`npu_loss_scale._internal.kernels`), each tensor is
    checked *and* unscaled in that one pass: ``readers`` then holds an :class:`Unscaled` with the
    unscaled values, and the flag counts exactly the infs and NaNs (no finite sum can overflow).
    """
    fused = None
    if readers is not None and reciprocal is not None:
        from npu_loss_scale._internal import (  # pylint: disable=import-outside-toplevel
            kernels as _kernels)
        fused = _kernels.load_unscale_check()
    sums = []
    for values in floating_values(grads):
        key = id(values)
        if fused is not None and values.dtype.name in _kernels.FUSED_DTYPES:
            unscaled, check = fused.nls_unscale_and_check(values, reciprocal.factors)
            sums.append(check)
            readers[key] = Unscaled(unscaled)
            continue
        if values.dtype not in (tf.float32, tf.float64):
            values = tf.cast(values, tf.float32)
        sums.append(tf.cast(tf.reduce_sum(values), tf.float32))
        if readers is not None:
            readers[key] = sums[-1]
    if not sums:
        return tf.zeros([], tf.float32)
    total = sums[0] if len(sums) == 1 else tf.add_n(sums)
    return tf.cast(tf.logical_not(tf.math.is_finite(total)), tf.float32)


def status_of(flags):
    """float32[1]: the sum of the flags (0 = nothing overflowed). Always one entry, so replicas
    that checked their gradients in different ways still have statuses of one shape."""
    flags = list(flags)
    if not flags:
        return tf.zeros([1], tf.float32)
    total = flags[0] if len(flags) == 1 else tf.add_n(flags)
    return tf.reshape(total, [1])


__all__ = ["nonfinite", "at_max", "count", "check_and_unscale", "nonfinite_flag", "Unscaled",
           "status_of"]
