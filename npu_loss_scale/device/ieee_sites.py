"""Overflow localisation in INF/NaN mode: the sites where the device would have saturated.

In INF/NaN mode values pass unchanged and the register is left alone; with localisation on
(:mod:`npu_loss_scale.device.localisation`), a place where the device would have saturated still
notes its site (an inf or a NaN there, on the forward value or on the gradient flowing back), so
an overflowed step gets the same record as in saturation mode.
"""
import tensorflow as tf

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale.device import localisation
from npu_loss_scale.device import saturate as saturate_lib

_IEEE_GRADIENT_NAME = "NpuLossScaleNoteIeee"


def _ieee_note(value, source, site, direction):
    flag_inf = tf.reduce_any(tf.math.is_inf(value))
    flag_nan = tf.reduce_any(tf.math.is_nan(value))
    return localisation.note_site(source, flag_inf, flag_nan, op_name=site, direction=direction,
                                  dtype=value.dtype)


@_graphs.as_is
def note_ieee(x, site=None, source=None):
    """``x`` unchanged (INF/NaN mode), its site noted for localisation, forward and backward."""
    source = saturate_lib.rounding_source(x, source)
    site = site or (x.op.name if source is None else source.op.name)
    note = _ieee_note(x, x if source is None else source, site, None)
    with tf.control_dependencies([note]):
        y = tf.identity(x)
    graph = tf.compat.v1.get_default_graph()
    with graph.gradient_override_map({"IdentityN": _IEEE_GRADIENT_NAME}):
        out = tf.raw_ops.IdentityN(input=[tf.stop_gradient(y), x])
    return out[0]


def _note_dense_ieee_gradient(dy, site):
    note = _ieee_note(dy, dy, site or dy.op.name, "backward")
    with tf.control_dependencies([note] if note is not None else []):
        return tf.identity(dy)


def _note_ieee_gradient(dy, site):
    return saturate_lib.on_gradient(dy, site, _note_dense_ieee_gradient)


@tf.RegisterGradient(_IEEE_GRADIENT_NAME)
def _note_ieee_registered_gradient(op, dy, dx):  # pylint: disable=unused-argument
    return [None, _note_ieee_gradient(dy, op.inputs[1].op.name)]


__all__ = ["note_ieee"]
