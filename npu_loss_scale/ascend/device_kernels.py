"""Ascend device kernels that scripts call through the adapter's raw op library, computed on CPU.

Both shims use these: ``npu_device.gen_npu_ops`` (TF2 scripts vendor an ``npu_ops.py`` calling
it), ``npu_bridge.helper.helper.get_gen_ops()`` and ``npu_bridge.estimator.npu_ops.dropout``
(TF1). They are built from TensorFlow ops, so they run eagerly, in ``tf.function`` and in
``tf.compat.v1`` graphs, and TensorFlow's autodiff differentiates them; no op of the device's
types (``DropOutDoMask``, ``FastGelu``, ...) is created, so a gradient a script registers for
those types is never consulted (and registering it still works: nothing here registers one).

What the device computes (from the adapter's op definitions and the device kernels' documented
behaviour):

* ``DropOutGenMask(shape, prob, seed, seed2)``: a uint8 vector holding one bit per element of
  ``shape``, padded to a multiple of 128 bits: ``ceil(n / 128) * 16`` bytes. Element ``i`` is
  bit ``i % 8`` (least significant first) of byte ``i // 8``; a bit is 1 (keep) with probability
  ``prob``, the keep probability. Padding bits are drawn too.
* ``DropOutDoMask(x, mask, keep_prob)``: ``x * (1 / keep_prob)`` where the element's bit is 1,
  exactly 0 where it is 0 (a select, so a dropped inf or NaN gives 0), in ``x``'s dtype, with
  ``1 / keep_prob`` computed in that dtype. ``keep_prob`` has ``x``'s dtype (float16 or
  float32). Its gradient is the same op applied to the incoming gradient.
* ``DropOutGenMaskV3``: one byte (0 or 1) per element. For a shape ``[*batch, M, N]`` whose
  last two dimensions are multiples of 16 the bytes come in the device's fractal (FRACTAL_NZ)
  order, shape ``[*batch, N/16, M/16, 16, 16]``: byte ``[..., n1, m1, m0, n0]`` belongs to
  element ``[..., 16*m1 + m0, 16*n1 + n0]``. Otherwise a vector of ``n`` rounded up to 16.
* ``DropOutDoMaskV3(x, mask, keep_prob)``: ``x * mask * (1 / keep_prob)`` (a product: a dropped
  inf or NaN stays NaN, as on the device).
* Seeds: ``seed`` and ``seed2`` both 0 draw a fresh, non-reproducible stream; otherwise the
  stream is fixed by the pair (the same masks, in order, in every run of the script). ``None``
  (what a script's ``get_seed`` returns without seeds) means 0, as for the adapter's op
  wrappers. The random numbers are TensorFlow's, not the device's generator: the same seeds
  give other masks than on the device.
* ``FastGelu(x) = x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|))`` (= ``x * sigmoid(1.702
  x)``) and ``FastGeluGrad(dy, x)``, its derivative times ``dy``.
"""
import numbers

import tensorflow as tf

from npu_loss_scale._internal.compat.ops import where

MASK_ALIGN_BITS = 128    # DropOutGenMask pads its bits to a multiple of this
V3_ALIGN = 16            # DropOutGenMaskV3: bytes padded to / fractal blocks of this
FAST_GELU_ALPHA = 1.702
_MASK_DTYPES = (tf.float16, tf.float32)
_PROB_DTYPES = (tf.float16, tf.float32)


# -- argument checks ---------------------------------------------------------------------------------
def _seed_attr(op, name, value):
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s: %s is an op attribute, a Python int (None means 0); got %r"
                        % (op, name, value))
    value = int(value)
    if not -2 ** 63 <= value < 2 ** 63:
        raise ValueError("%s: %s must fit in int64; got %d" % (op, name, value))
    return value


def shape_input(op, shape):
    if isinstance(shape, tf.TensorShape):
        if not shape.is_fully_defined():
            raise ValueError("%s: shape must be fully defined (or a shape tensor such as "
                             "tf.shape(x)); got %s" % (op, shape))
        shape = shape.as_list()
    tensor = tf.convert_to_tensor(shape, name="shape")
    if tensor.dtype not in (tf.int32, tf.int64):
        raise TypeError("%s: shape must be int32 or int64 (the op's T); got dtype %s"
                        % (op, tensor.dtype.name))
    if tensor.shape.rank is not None and tensor.shape.rank != 1:
        raise ValueError("%s: shape must be a 1-D shape vector; got a tensor of shape %s"
                         % (op, tensor.shape))
    return tensor


def static_shape(shape_tensor):
    """What is known of the shape a shape vector describes (a partially known TensorShape)."""
    value = tf.get_static_value(shape_tensor)
    if value is not None:
        return tf.TensorShape([int(d) for d in value.tolist()])
    from tensorflow.python.framework import tensor_util  # pylint: disable=import-outside-toplevel
    return tensor_util.constant_value_as_shape(shape_tensor)  # tf.shape(x) of a partial shape


def _prob_input(op, prob):
    if isinstance(prob, numbers.Real) and not isinstance(prob, bool):
        if not 0.0 <= float(prob) <= 1.0:
            raise ValueError("%s: prob, the probability that a bit is 1 (kept), must be in "
                             "[0, 1]; got %r" % (op, prob))
    tensor = tf.convert_to_tensor(prob, name="prob")
    if tensor.dtype not in _PROB_DTYPES:
        raise TypeError("%s: prob must be float32 or float16 (the op's S); got dtype %s"
                        % (op, tensor.dtype.name))
    if tensor.shape.rank is not None and tensor.shape.rank != 0:
        raise ValueError("%s: prob must be a scalar; got shape %s" % (op, tensor.shape))
    return tensor


def _float_input(op, name, value, dtypes):
    tensor = tf.convert_to_tensor(value, name=name)
    if tensor.dtype not in dtypes:
        raise TypeError("%s: %s must be %s (the device kernel's types); got dtype %s" % (
            op, name, " or ".join(d.name for d in dtypes), tensor.dtype.name))
    return tensor


def _keep_prob_input(op, keep_prob, dtype):
    if tf.is_tensor(keep_prob) or isinstance(keep_prob, tf.Variable):
        if keep_prob.dtype.base_dtype != dtype:
            raise TypeError("%s: keep_prob has dtype %s but x is %s; the op takes keep_prob in "
                            "x's dtype" % (op, keep_prob.dtype.base_dtype.name, dtype.name))
    keep = tf.convert_to_tensor(keep_prob, dtype=dtype, name="keep_prob")
    if keep.shape.rank is not None and keep.shape.num_elements() != 1:
        raise ValueError("%s: keep_prob must hold one value; got shape %s" % (op, keep.shape))
    return tf.reshape(keep, [])


def _mask_input(op, mask):
    mask = tf.convert_to_tensor(mask, name="mask")
    if mask.dtype != tf.uint8:
        raise TypeError("%s: mask must be uint8 (what the gen-mask op returns); got dtype %s"
                        % (op, mask.dtype.name))
    return mask


def _uniform(count, seed, seed2):
    # TensorFlow's own stateful generator with the op-level seed pair: (0, 0) seeds it randomly,
    # any other pair gives the same stream in every run; each run of the op continues it.
    return tf.raw_ops.RandomUniform(shape=tf.reshape(count, [1]), dtype=tf.float32, seed=seed,
                                    seed2=seed2)


def _check_prob_range(op, prob):
    """Assertions (for a tensor prob) that it lies in [0, 1], as the device kernel checks."""
    if tf.get_static_value(prob) is not None:
        value = float(tf.get_static_value(prob))
        if not 0.0 <= value <= 1.0:
            raise ValueError("%s: prob must be in [0, 1]; got %r" % (op, value))
        return []
    p = tf.cast(prob, tf.float32)
    return [tf.debugging.assert_greater_equal(p, 0.0, message=op + ": prob must be >= 0"),
            tf.debugging.assert_less_equal(p, 1.0, message=op + ": prob must be <= 1")]


# -- bit masks ---------------------------------------------------------------------------------------
def mask_bytes_for(num_elements):
    """Bytes of a DropOutGenMask mask for ``num_elements`` elements (one bit each, 128-aligned)."""
    return -(-int(num_elements) // MASK_ALIGN_BITS) * (MASK_ALIGN_BITS // 8)


def _pack_bits(bits):
    """bool [8k] -> uint8 [k]; element i is bit i % 8 (least significant first) of byte i // 8."""
    weights = tf.constant([1 << b for b in range(8)], tf.int32)
    grouped = tf.reshape(tf.cast(bits, tf.int32), [-1, 8])
    return tf.cast(tf.reduce_sum(grouped * weights, axis=1), tf.uint8)


def _unpack_bits(mask, count):
    """uint8 [k] -> bool [count]: the first ``count`` bits, in the order of :func:`_pack_bits`."""
    shifted = tf.bitwise.right_shift(tf.cast(mask, tf.int32)[:, None], tf.range(8, dtype=tf.int32))
    return tf.reshape(tf.bitwise.bitwise_and(shifted, 1), [-1])[:count] > 0


def drop_out_gen_mask(shape, prob, seed=0, seed2=0, name=None):
    """The device's DropOutGenMask: a uint8 bit mask, bit 1 with probability ``prob`` (keep)."""
    op = "drop_out_gen_mask"
    seed, seed2 = _seed_attr(op, "seed", seed), _seed_attr(op, "seed2", seed2)
    with tf.compat.v1.name_scope(name, "DropOutGenMask", [shape, prob]):
        shape = shape_input(op, shape)
        prob = _prob_input(op, prob)
        count = tf.reduce_prod(tf.cast(shape, tf.int64))
        padded = (count + MASK_ALIGN_BITS - 1) // MASK_ALIGN_BITS * MASK_ALIGN_BITS
        with tf.control_dependencies(_check_prob_range(op, prob)):
            bits = _uniform(padded, seed, seed2) < tf.cast(prob, tf.float32)
        mask = _pack_bits(bits)
        known = static_shape(shape)
        if known.is_fully_defined():
            mask.set_shape([mask_bytes_for(known.num_elements())])
        return mask


def drop_out_do_mask(x, mask, keep_prob, name=None):
    """The device's DropOutDoMask: ``x / keep_prob`` where the element's mask bit is 1, else 0."""
    op = "drop_out_do_mask"
    with tf.compat.v1.name_scope(name, "DropOutDoMask", [x, mask, keep_prob]):
        x = _float_input(op, "x", x, _MASK_DTYPES)
        keep = _keep_prob_input(op, keep_prob, x.dtype)
        mask = _mask_input(op, mask)
        if mask.shape.rank is not None and mask.shape.rank != 1:
            raise ValueError("%s: mask must be the 1-D uint8 vector drop_out_gen_mask returns; "
                             "got shape %s" % (op, mask.shape))
        count = tf.size(x, out_type=tf.int64)
        checks = []
        if x.shape.is_fully_defined() and mask.shape[0] is not None:
            want = mask_bytes_for(x.shape.num_elements())
            if mask.shape[0] != want:
                raise ValueError(
                    "%s: mask has %d bytes; x of shape %s needs %d (one bit per element, padded "
                    "to a multiple of 128 bits): was the mask generated for another shape (a "
                    "noise_shape other than x's)?" % (op, mask.shape[0], x.shape, want))
        else:
            want = (count + MASK_ALIGN_BITS - 1) // MASK_ALIGN_BITS * (MASK_ALIGN_BITS // 8)
            checks.append(tf.debugging.assert_equal(
                tf.size(mask, out_type=tf.int64), want,
                message="%s: the mask's byte count does not match x (one bit per element, "
                        "padded to a multiple of 128 bits)" % op))
        with tf.control_dependencies(checks):
            keep_bits = tf.reshape(_unpack_bits(mask, count), tf.shape(x))
        scale = tf.stop_gradient(tf.math.reciprocal(keep))
        return where(keep_bits, x * scale, tf.zeros_like(x))


# -- V3: byte masks ------------------------------------------------------------------------------------
def _v3_layout(known):
    """'nz', 'flat' or None (decided when the op runs) for a (partially known) shape."""
    if known.rank is None:
        return None
    if known.rank < 2:
        return "flat"
    rows, cols = known.as_list()[-2:]
    if rows is None or cols is None:
        return None
    return "nz" if rows % V3_ALIGN == 0 and cols % V3_ALIGN == 0 else "flat"


def _nz_shape(shape):
    """[*batch, M, N] -> [*batch, N/16, M/16, 16, 16] (int64 shape vector)."""
    shape = tf.cast(shape, tf.int64)
    return tf.concat([shape[:-2], tf.stack([shape[-1] // V3_ALIGN, shape[-2] // V3_ALIGN]),
                      tf.constant([V3_ALIGN, V3_ALIGN], tf.int64)], axis=0)


def _is_nz(shape):
    padded = tf.concat([tf.ones([2], tf.int64), tf.cast(shape, tf.int64)], axis=0)
    return tf.logical_and(tf.logical_and(tf.size(shape) >= 2, padded[-1] % V3_ALIGN == 0),
                          padded[-2] % V3_ALIGN == 0)


def drop_out_gen_mask_v3(shape, prob, seed=0, seed2=0, name=None):
    """The device's DropOutGenMaskV3: one byte (1 = keep, probability ``prob``) per element."""
    op = "drop_out_gen_mask_v3"
    seed, seed2 = _seed_attr(op, "seed", seed), _seed_attr(op, "seed2", seed2)
    with tf.compat.v1.name_scope(name, "DropOutGenMaskV3", [shape, prob]):
        shape = shape_input(op, shape)
        prob = _prob_input(op, prob)
        count = tf.reduce_prod(tf.cast(shape, tf.int64))
        padded = (count + V3_ALIGN - 1) // V3_ALIGN * V3_ALIGN
        with tf.control_dependencies(_check_prob_range(op, prob)):
            flat = tf.cast(_uniform(padded, seed, seed2) < tf.cast(prob, tf.float32), tf.uint8)
        known = static_shape(shape)
        layout = _v3_layout(known)
        if layout == "flat":
            if known.is_fully_defined():
                n = known.num_elements()
                flat.set_shape([-(-n // V3_ALIGN) * V3_ALIGN])
            return flat
        if layout == "nz":
            mask = tf.reshape(flat[:count], _nz_shape(shape))
            dims = known.as_list()
            mask.set_shape(dims[:-2] + [dims[-1] // V3_ALIGN, dims[-2] // V3_ALIGN,
                                        V3_ALIGN, V3_ALIGN])
            return mask
        return tf.cond(_is_nz(shape), lambda: tf.reshape(flat[:count], _nz_shape(shape)),
                       lambda: flat)


def _nz_to_nd(mask, x):
    """A [*batch, N/16, M/16, 16, 16] byte mask in the order of x [*batch, M, N]."""
    rank = tf.rank(mask)
    perm = tf.concat([tf.range(rank - 4), tf.stack([rank - 3, rank - 2, rank - 4, rank - 1])], 0)
    return tf.reshape(tf.transpose(mask, perm), tf.shape(x))


def drop_out_do_mask_v3(x, mask, keep_prob, name=None):
    """The device's DropOutDoMaskV3: ``x * mask / keep_prob`` with a byte mask."""
    op = "drop_out_do_mask_v3"
    with tf.compat.v1.name_scope(name, "DropOutDoMaskV3", [x, mask, keep_prob]):
        x = _float_input(op, "x", x, _MASK_DTYPES)
        keep = _keep_prob_input(op, keep_prob, x.dtype)
        mask = _mask_input(op, mask)
        count = tf.size(x, out_type=tf.int64)
        padded = (count + V3_ALIGN - 1) // V3_ALIGN * V3_ALIGN
        x_rank, m_rank = x.shape.rank, mask.shape.rank
        if m_rank is not None and m_rank != 1 and not (x_rank is not None and x_rank >= 2
                                                       and m_rank == x_rank + 2):
            raise ValueError(
                "%s: mask must be what drop_out_gen_mask_v3 returns for x's shape: a vector, or "
                "[*batch, N/16, M/16, 16, 16] for x [*batch, M, N]; got mask shape %s for x "
                "shape %s" % (op, mask.shape, x.shape))
        if m_rank == 1 and mask.shape[0] is not None and x.shape.is_fully_defined():
            want = -(-x.shape.num_elements() // V3_ALIGN) * V3_ALIGN
            if mask.shape[0] != want:
                raise ValueError("%s: mask has %d bytes; x of shape %s needs %d (one per "
                                 "element, padded to a multiple of 16)"
                                 % (op, mask.shape[0], x.shape, want))
        if m_rank is not None and m_rank > 1 and mask.shape.is_fully_defined() \
                and x.shape.is_fully_defined():
            dims = x.shape.as_list()
            want = dims[:-2] + [dims[-1] // V3_ALIGN, dims[-2] // V3_ALIGN, V3_ALIGN, V3_ALIGN]
            if mask.shape.as_list() != want or dims[-1] % V3_ALIGN or dims[-2] % V3_ALIGN:
                raise ValueError("%s: a fractal mask for x of shape %s has shape %s; got %s"
                                 % (op, x.shape, want, mask.shape))

        def flat_bytes():
            check = tf.debugging.assert_equal(
                tf.size(mask, out_type=tf.int64), padded,
                message="%s: the mask's byte count does not match x (one byte per element, "
                        "padded to a multiple of 16)" % op)
            with tf.control_dependencies([check]):
                return tf.reshape(tf.reshape(mask, [-1])[:count], tf.shape(x))

        if m_rank == 1:
            keep_bytes = flat_bytes()
        elif m_rank is not None:
            keep_bytes = _nz_to_nd(mask, x)
        else:
            keep_bytes = tf.cond(tf.equal(tf.rank(mask), 1), flat_bytes,
                                 lambda: _nz_to_nd(mask, x))
        scale = tf.stop_gradient(tf.math.reciprocal(keep))
        return x * tf.cast(keep_bytes, x.dtype) * scale


# -- FastGelu ------------------------------------------------------------------------------------------
_GELU_DTYPES = (tf.float16, tf.float32, tf.float64)


def fast_gelu(features, name=None):
    """The device's FastGelu: ``x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|))``."""
    with tf.compat.v1.name_scope(name, "FastGelu", [features]):
        x = _float_input("fast_gelu", "features", features, _GELU_DTYPES)
        alpha = tf.constant(FAST_GELU_ALPHA, x.dtype)
        magnitude = tf.abs(x)
        return (x / (1 + tf.exp(-alpha * magnitude))) * tf.exp(alpha / 2 * (x - magnitude))


def fast_gelu_grad(gradients, features, name=None):
    """The device's FastGeluGrad: ``gradients`` times the derivative of FastGelu at ``features``."""
    op = "fast_gelu_grad"
    with tf.compat.v1.name_scope(name, "FastGeluGrad", [gradients, features]):
        x = _float_input(op, "features", features, _GELU_DTYPES)
        dy = _float_input(op, "gradients", gradients, _GELU_DTYPES)
        if dy.dtype != x.dtype:
            raise TypeError("%s: gradients (%s) and features (%s) must have one dtype"
                            % (op, dy.dtype.name, x.dtype.name))
        if not dy.shape.is_compatible_with(x.shape):
            raise ValueError("%s: gradients of shape %s do not match features of shape %s"
                             % (op, dy.shape, x.shape))
        alpha = tf.constant(FAST_GELU_ALPHA, x.dtype)
        s = tf.sigmoid(alpha * x)
        return dy * (s + alpha * x * s * (1 - s))


KERNELS = {
    "drop_out_gen_mask": drop_out_gen_mask,
    "drop_out_do_mask": drop_out_do_mask,
    "drop_out_gen_mask_v3": drop_out_gen_mask_v3,
    "drop_out_do_mask_v3": drop_out_do_mask_v3,
    "fast_gelu": fast_gelu,
    "fast_gelu_grad": fast_gelu_grad,
}


__all__ = [
    "MASK_ALIGN_BITS", "V3_ALIGN", "FAST_GELU_ALPHA", "shape_input", "static_shape",
    "mask_bytes_for", "drop_out_gen_mask", "drop_out_do_mask", "drop_out_gen_mask_v3",
    "drop_out_do_mask_v3", "fast_gelu", "fast_gelu_grad", "KERNELS",
]
