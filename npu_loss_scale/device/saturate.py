"""Saturation-mode arithmetic: what an Atlas training device does to an overflowing value.

In saturation mode an overflowing result becomes the extreme value of its dtype (±65504 for
float16, ±3.4028235e38 for float32) and NaN becomes 0; the event sets the float-status register
(:mod:`npu_loss_scale.device.float_status`). :func:`_saturate` applies that to a tensor on the
forward pass and to the gradient flowing back through it, whatever the overflow mode and backend;
the public :func:`npu_loss_scale.device.register.saturate` decides whether it applies.
"""
import threading

import tensorflow as tf

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal import kernels as _kernels
from npu_loss_scale._internal.compat import tape
from npu_loss_scale._internal.compat.ops import where
from npu_loss_scale.device import float_status
from npu_loss_scale.device import localisation

as_is = _graphs.as_is


def _saturate_values(x):
    """(saturated x, flags) for a floating tensor, in saturation mode; ``flags`` is bool[2]: an
    inf seen, a NaN seen.

    A value of the tensor's own dtype that overflowed is ±inf, so clipping to ±MAX maps exactly
    the overflowed values (and nothing else) to ±MAX. With the package's kernels loaded
    (:mod:`npu_loss_scale._internal.kernels`) that is one op, ``NlsSaturate``, one pass over
    ``x``; otherwise the value takes three passes (``IsNan``, a select against a scalar zero, one
    ``ClipByValue``) and the flags three (``IsInf`` and two ``Any``). Both give the same bits.
    """
    fused = _kernels.load_unscale_check()
    if fused is not None:
        return tuple(fused.nls_saturate(x))
    big = tf.constant(x.dtype.max, x.dtype)
    nan = tf.math.is_nan(x)
    y = tf.raw_ops.ClipByValue(t=where(nan, tf.constant(0, x.dtype), x),
                               clip_value_min=-big, clip_value_max=big)
    return y, tf.stack([tf.reduce_any(tf.math.is_inf(x)), tf.reduce_any(nan)])


def check_floating(name, x):
    """Refuses a tensor ``x`` (the argument ``name``) that is not floating-point."""
    if not x.dtype.is_floating:
        raise TypeError("%s must be a floating-point tensor (float16, bfloat16, float32 or "
                        "float64); got dtype %s" % (name, x.dtype.name))


def rounding_source(x, source=None):
    """``source`` if given, else the wider floating value a rounding cast made ``x`` from (the
    magnitude localisation reports), else None."""
    if source is None and x.op.type == "Cast" and x.op.inputs[0].dtype.is_floating \
            and x.op.inputs[0].dtype.size > x.dtype.size:
        return x.op.inputs[0]
    return source


@as_is
def _saturate(x, name=None, site=None, source=None):
    """Saturation regardless of mode and backend (the arithmetic of a device in saturation mode).

    ``site``: the op name overflow localisation reports for this saturation (default: ``x``'s
    op); ``source``: the value before rounding to ``x``'s dtype, whose magnitude localisation
    reports (default ``x``). Both only matter with localisation on.
    """
    with tf.name_scope(name or "saturate"):
        return _saturate_with_grad(x, site, source)


_internal = threading.local()

#: How deep this thread is in :func:`~npu_loss_scale.device.saturation.saturate_every_op`
#: (``depth``; kept here, below that module, for :func:`_round_half_recorded`).
every_op_state = threading.local()


def building_internals():
    """True while the saturation of a gradient is being built in this thread: its own ops
    (clipping constants, selects) are not ops of the model, and
    :func:`~npu_loss_scale.device.saturation.saturate_every_op` leaves them alone."""
    return getattr(_internal, "depth", 0) > 0


def on_gradient(dy, site, build):
    """``build(dense dy, site)`` for a gradient (None kept; an IndexedSlices' values), with the
    ops it makes marked as internals (see :func:`building_internals`)."""
    if dy is None:
        return None
    if isinstance(dy, tf.IndexedSlices):
        return tf.IndexedSlices(on_gradient(dy.values, site, build), dy.indices, dy.dense_shape)
    dy = tf.convert_to_tensor(dy)
    depth = getattr(_internal, "depth", 0)
    _internal.depth = depth + 1
    try:
        return build(dy, site)
    finally:
        _internal.depth = depth


def _once_run(value, deps):
    """``value`` for readers that must come after ``deps`` (the register's record of the value's
    saturation, a localisation note). In a ``tf.compat.v1`` graph that is an identity under
    them. Eagerly they ran already, and in a function graph TensorFlow orders by resource
    (:func:`~npu_loss_scale._internal.graphs.orders_resource_uses`) every later read of the
    register and of the site table waits for them anyway: there ``value`` is given as it is.
    (The identity would make each value wait for every record built before its own, as those
    are chained, and so run the step's ops one after the other.)"""
    if tf.executing_eagerly() or _graphs.orders_resource_uses():
        return value
    with tf.control_dependencies(deps):
        return tf.identity(value)


def _saturate_dense_gradient(dy, site):
    dy_sat, flags = _saturate_values(dy)
    deps = [float_status.record_flags(flags)]
    if localisation.enabled() and not tf.executing_eagerly():
        deps.append(localisation.note_site(dy, flags[0], flags[1], op_name=site or dy.op.name,
                                           direction="backward", dtype=dy.dtype))
    return _once_run(dy_sat, deps)


def _saturate_gradient(dy, site=None):
    return on_gradient(dy, site, _saturate_dense_gradient)


# One gradient function for every saturate() in every graph, registered once. (tf.custom_gradient
# registers a new one per call in graph mode, and TensorFlow's registry keeps each alive for
# ever, with the graph it closes over.) The forward pass builds IdentityN([y, x]) under a gradient
# override: output 0 is the saturated value, and the gradient reaching it goes to x, saturated.
_GRADIENT_NAME = "NpuLossScaleSaturate"


def _backward(dy, unused_dx=None, site=None):  # pylint: disable=unused-argument
    return [None, _saturate_gradient(dy, site)]


@tf.RegisterGradient(_GRADIENT_NAME)
def _saturate_registered_gradient(op, dy, dx):  # pylint: disable=unused-argument
    return _backward(dy, site=op.inputs[1].op.name if localisation.enabled() else None)


def _record_on_tape(outputs, inputs, site):
    tape.record_operation("NpuLossScaleSaturate", outputs, inputs,
                          lambda dy, dx=None: _backward(dy, dx, site))


def _saturate_with_grad(x, site=None, source=None):
    y, flags = _saturate_values(x)
    deps = [float_status.record_flags(flags)]
    if localisation.enabled() and not tf.executing_eagerly():
        source = rounding_source(x, source)
        site = site or (x.op.name if source is None else source.op.name)
        deps.append(localisation.note_site(x if source is None else source, flags[0], flags[1],
                                           op_name=site, dtype=x.dtype))
    y = _once_run(y, deps)
    if tf.executing_eagerly():
        return _eager_saturate(x, y)
    graph = tf.compat.v1.get_default_graph()
    with graph.gradient_override_map({"IdentityN": _GRADIENT_NAME}):
        out = tf.raw_ops.IdentityN(input=[tf.stop_gradient(y), x])
    _record_on_tape(out, [y, x], site)
    return out[0]


# -- the rounding of the precision emulation, fused -------------------------------------------------
#: The name of the fused rounding's op (its type says the mode: ``NlsRoundHalfSaturate``,
#: ``NlsRoundHalf``).
ROUNDING_NAME = "round_to_float16"


def round_half(x, saturating=True):
    """``x`` (float32) rounded to float16, saturated (recorded in the register) and handed back
    as float32, in one op (``NlsRoundHalfSaturate``): the same bits and register words as a
    ``Cast``, :func:`_saturate` and a ``Cast`` back, and the same gradient (the gradient flowing
    back is rounded and saturated the same way). ``saturating=False``: the rounding of INF/NaN
    mode (``NlsRoundHalf``: an overflow stays inf, the register is left alone), the bits of a
    ``Cast`` and a ``Cast`` back. None when the package's kernels are not loaded
    (:mod:`npu_loss_scale._internal.kernels`): the caller builds the ops instead. With
    overflow localisation on, the rounding is a site named by ``x``'s op, with ``x``'s
    magnitude (as :func:`rounding_source` names a rounding ``Cast``), and so is the gradient's
    rounding on its way back."""
    fused = _kernels.load_unscale_check()
    if fused is None:
        return None
    return _round_half_recorded(fused, x, saturating=saturating)


def _round_half_recorded(fused, x, site=None, direction=None, saturating=True):
    # one name in both modes: localisation names a site under saturate_every_op by it
    if saturating:
        y, flags = fused.nls_round_half_saturate(x, name=ROUNDING_NAME)
        deps = [float_status.record_flags(flags)]
    else:
        y, flags = fused.nls_round_half(x, name=ROUNDING_NAME)
        deps = []
    if localisation.enabled() and not tf.executing_eagerly():
        if getattr(every_op_state, "depth", 0) > 0:
            # under saturate_every_op a rounding's float16 cast is itself an op that saturates:
            # the site is the rounding, forward or backward, as the cast would be (its name says
            # which op it rounds for: X_precision/..., gradients/...); the doctor replays it
            site = y.op.name
        elif site is None:
            site = x.op.name   # the op whose value it rounds
        deps.append(localisation.note_site(x, flags[0], flags[1], op_name=site,
                                           direction=direction, dtype=tf.float16))
    return _once_run(y, deps)


def _round_half_dense_gradient(dy, site):
    if localisation.enabled():   # every rounding is a site: none is taken as already rounded
        return _round_half_recorded(_kernels.load_unscale_check(), dy, site, "backward")
    if rounded_to(dy) == tf.float16:
        return dy   # a rounded value (a backward cube op's rounded result): rounding changes nothing
    out = _round_half_recorded(_kernels.load_unscale_check(), dy)
    if not tf.executing_eagerly():   # a cube op's gradient reading it does not round it again
        mark_rounded(out, tf.float16)
    return out


def _round_half_ieee_dense_gradient(dy, site):
    return _round_half_recorded(_kernels.load_unscale_check(), dy, site, "backward",
                                saturating=False)


_ROUNDING_GRADIENTS = {"NlsRoundHalfSaturate": _round_half_dense_gradient,
                       "NlsRoundHalf": _round_half_ieee_dense_gradient}


# Values of a graph known to be saturated roundings (finite, in range, of the dtype's precision):
# rounding one again to its dtype changes no value and sets no register word, so the precision
# emulation takes it as it is (:func:`npu_loss_scale.device.precision_rules.round_operand`, which
# decides when that holds: saturation mode, no localisation).
_ROUNDED_ATTR = "_npu_loss_scale_rounded"   # on the graph: {tensor ref: dtype}, dies with it
_rounded_lock = threading.Lock()


def ref(tensor):
    """A hashable reference to ``tensor`` (``ref()``, or 1.15's ``experimental_ref()``)."""
    return tensor.ref() if hasattr(tensor, "ref") else tensor.experimental_ref()


def mark_rounded(tensor, dtype):
    """Notes that graph tensor ``tensor`` is a saturated rounding to ``dtype``."""
    with _rounded_lock:
        rounded = getattr(tensor.graph, _ROUNDED_ATTR, None)
        if rounded is None:
            rounded = {}
            setattr(tensor.graph, _ROUNDED_ATTR, rounded)
        rounded[ref(tensor)] = dtype


def rounded_to(tensor):
    """The dtype graph tensor ``tensor`` is a saturated rounding to, or None (and for an eager
    tensor)."""
    if tf.executing_eagerly():
        return None
    with _rounded_lock:
        return getattr(tensor.graph, _ROUNDED_ATTR, {}).get(ref(tensor))


@tf.RegisterGradient("NlsRoundHalfSaturate")
@tf.RegisterGradient("NlsRoundHalf")
def _round_half_gradient(op, dy, unused_dflags):  # pylint: disable=unused-argument
    """Either fused rounding's gradient: ``dy`` rounded as the forward value was."""
    site = op.inputs[0].op.name if localisation.enabled() else None
    return on_gradient(dy, site, _ROUNDING_GRADIENTS[op.type])


@tf.RegisterGradient("NlsSaturate")
def _saturate_op_gradient(op, dy, unused_dflags):  # pylint: disable=unused-argument
    # the forward value is always taken through stop_gradient (_saturate_with_grad) or a custom
    # gradient (_eager_saturate); should a gradient reach the op, it is the device's: saturated
    return _saturate_gradient(dy)


def _eager_saturate(x, y):
    @tf.custom_gradient
    def passthrough(value):  # pylint: disable=unused-argument
        return tf.identity(y), lambda dy: _saturate_gradient(dy)
    return passthrough(x)


__all__ = ["building_internals", "check_floating", "mark_rounded", "round_half", "rounded_to"]
