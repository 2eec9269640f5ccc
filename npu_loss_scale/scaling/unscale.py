"""Unscaling gradients exactly at every float32 loss scale: the one rule every front end uses.

Gradients of the scaled loss are unscaled by multiplying with ``1 / S``. For ``S`` above
``2**126`` that reciprocal is a float32 subnormal, and TensorFlow's CPU kernels flush subnormals
to zero (inputs and results): one multiply would turn every gradient into zero, and a step
"applied" at such a scale would change nothing. The dynamic rules reach those scales (2**127
after long runs without an overflow), so the reciprocal is kept as two float32 factors, both
normal at every scale:

* ``S <= 2**126``: ``(1, fl(1/S))``: the product is ``g * fl(1/S)``, bitwise TensorFlow's
  ``Mul`` by the reciprocal (multiplying by 1 is exact);
* ``S > 2**126``: ``(2**-64, fl(2**64/S))``: ``g * 2**-64`` is exact (a scaled gradient that
  small would be below float32 anyway), and ``2**64 / S`` lies in ``[2**-64, 2**-62]``.

For a power-of-two scale both ways are exact: the unscaled gradient is ``g`` itself. float16
and bfloat16 gradients are unscaled in float32 and rounded back (neither holds ``2**-32``,
say); float64 ones in float64 with the same two factors.

:class:`Reciprocal` holds the factors; :func:`unscale_gradient` applies them. The fused kernel
(:mod:`npu_loss_scale._internal.kernels`) takes the same two factors and computes the same products.
:func:`npu_loss_scale.scaling.reference.ascend.unscale` is the NumPy twin.
"""
import tensorflow as tf

from npu_loss_scale._internal.compat.ops import where  # 1.15's tf.where is the deprecated v1 op
from npu_loss_scale._internal.graphs import as_is

#: The largest scale whose float32 reciprocal is normal (``2**-126`` is float32's smallest).
LARGEST_PLAIN_SCALE = 2.0 ** 126
#: Above it, the gradient is first multiplied by ``2**-SPLIT_EXPONENT``.
SPLIT_EXPONENT = 64


class Reciprocal:
    """``1 / loss_scale`` as two normal float32 factors (see the module docstring).

    ``first`` and ``second`` are float32 scalar tensors; ``factors`` stacks them (shape ``[2]``,
    what the fused kernel takes). A plain float32 scalar ``value`` is accepted as an exact
    single factor (``Reciprocal.exact(1.0)``), for callers that only want the check.
    """

    def __init__(self, first, second):
        self.first = first
        self.second = second
        self._factors = None

    @classmethod
    def of(cls, loss_scale):
        """The factors of ``1 / loss_scale`` (a float32 scalar tensor or number)."""
        scale = tf.cast(loss_scale, tf.float32)
        split = scale > LARGEST_PLAIN_SCALE
        first = where(split, tf.constant(2.0 ** -SPLIT_EXPONENT, tf.float32),
                      tf.constant(1.0, tf.float32))
        second = where(split, tf.constant(2.0 ** SPLIT_EXPONENT, tf.float32) / scale,
                       tf.math.reciprocal(scale))
        return cls(first, second)

    @classmethod
    def exact(cls, value):
        """One factor known to be normal and exact (``1.0`` for a check-only call)."""
        return cls(tf.constant(1.0, tf.float32), tf.cast(value, tf.float32))

    @property
    def factors(self):
        if self._factors is None:
            self._factors = tf.stack([self.first, self.second])
        return self._factors


def as_reciprocal(value):
    """``value`` if it is a :class:`Reciprocal`, else :meth:`Reciprocal.exact` of it."""
    return value if isinstance(value, Reciprocal) else Reciprocal.exact(value)


@as_is   # graph building only (it loads the fused kernel: Python work on files)
def unscale_values(values, reciprocal):
    """The dense tensor ``values`` times ``reciprocal`` (a :class:`Reciprocal`).

    One pass with the fused kernel when it is available (it multiplies in-register); else two
    multiplies. The first is a ``MulNoNan`` (the same product: ``first`` is never 0): Grappler
    reorders a chain ``(x * a) * b`` of two ``Mul`` into ``x * (a * b)``, and ``a * b`` is the
    subnormal reciprocal that flushes to zero.
    """
    from npu_loss_scale._internal import kernels as _kernels  # pylint: disable=import-outside-toplevel
    if values.dtype.name in _kernels.FUSED_DTYPES:
        fused = _kernels.load_unscale_check()
        if fused is not None:
            return fused.nls_unscale_and_check(values, reciprocal.factors)[0]
    wide = values if values.dtype in (tf.float32, tf.float64) else tf.cast(values, tf.float32)
    first = tf.cast(reciprocal.first, wide.dtype)
    second = tf.cast(reciprocal.second, wide.dtype)
    out = tf.math.multiply_no_nan(wide, first) * second
    return out if out.dtype == values.dtype else tf.cast(out, values.dtype)


def unscale_gradient(grad, reciprocal):
    """``grad`` (a tensor or ``IndexedSlices``) unscaled by ``reciprocal``.

    ``reciprocal`` is a :class:`Reciprocal` (``Reciprocal.of(loss_scale)``); a plain float32
    scalar counts as one exact factor.
    """
    reciprocal = as_reciprocal(reciprocal)
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(unscale_values(grad.values, reciprocal), grad.indices,
                                grad.dense_shape)
    return unscale_values(grad, reciprocal)


__all__ = ["Reciprocal", "as_reciprocal", "unscale_values", "unscale_gradient",
           "LARGEST_PLAIN_SCALE", "SPLIT_EXPONENT"]
