"""What each ``precision_mode`` does to which ops, shared by the two ways the emulation applies it
(:mod:`npu_loss_scale.device.precision` when a TF1 session is made,
:mod:`npu_loss_scale.device.op_precision` when a TF2 op is built or run): the op types, the
operand and result dtypes per mode, the rounding with saturation, and the record of the ops of
a graph already handled, so that neither path rounds an op twice."""
import contextlib
import threading
import weakref

import tensorflow as tf

from npu_loss_scale.device import localisation
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import saturate as saturate_lib
from npu_loss_scale.device.precision_modes import PRECISION_MODES

__all__ = ["CUBE_OPS", "FORCE_FP16_OPS", "RULES", "check_precision_mode", "round_to",
           "round_operand", "handled_ops", "rewrite_counters"]

CUBE_OPS = frozenset([
    "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D", "Conv2DBackpropInput",
    "Conv2DBackpropFilter", "Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2",
    "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter",
])
FORCE_FP16_OPS = CUBE_OPS | frozenset([
    "Add", "AddV2", "Sub", "Mul", "RealDiv", "BiasAdd", "BiasAddGrad", "Relu", "ReluGrad",
    "Relu6", "Elu", "Selu", "Sigmoid", "SigmoidGrad", "Tanh", "TanhGrad", "Square", "Sqrt",
    "Rsqrt", "Exp", "Softplus", "MaxPool", "AvgPool", "AvgPoolGrad", "MaxPoolGrad",
])

# mode -> (op types, operand dtype, result dtype or None to keep float32)
RULES = {
    "allow_fp32_to_fp16": (CUBE_OPS, tf.float16, tf.float16),
    "allow_mix_precision": (CUBE_OPS, tf.float16, tf.float16),
    "allow_mix_precision_fp16": (CUBE_OPS, tf.float16, tf.float16),
    "force_fp16": (FORCE_FP16_OPS, tf.float16, tf.float16),
    "cube_fp16in_fp32out": (CUBE_OPS, tf.float16, None),
    "force_fp32": (frozenset(), None, None),
    "must_keep_origin_dtype": (frozenset(), None, None),
    "allow_mix_precision_bf16": (CUBE_OPS, tf.bfloat16, tf.bfloat16),
    "allow_fp32_to_bf16": (CUBE_OPS, tf.bfloat16, tf.bfloat16),
    "force_lowerprecision": (CUBE_OPS, tf.float16, tf.float16),
}

class _Counters:
    """How often the emulation applied a precision mode, process-wide (for tests and the
    benchmark: a training step after the first must add to none of them).

    ``scans``: walks of a session's graph for ops to rewrite; ``rewrites``: those that rewrote
    some; ``rewritten_ops``: ops a session's rewrite rounded; ``traced_ops``: ops rounded as
    built in a function graph; ``eager_ops``: ops rounded as run eagerly.
    """

    NAMES = ("scans", "rewrites", "rewritten_ops", "traced_ops", "eager_ops")

    def __init__(self):
        for name in self.NAMES:
            setattr(self, name, 0)

    def snapshot(self):
        """The counts now, as a dict."""
        return {name: getattr(self, name) for name in self.NAMES}


rewrite_counters = _Counters()

_lock = threading.Lock()
_done = weakref.WeakKeyDictionary()   # graph -> set of op names already handled


def check_precision_mode(value, name="precision_mode"):
    """``value`` as a str after checking it is one the device accepts (bytes are decoded)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value not in PRECISION_MODES:
        raise ValueError("%s must be one of %s; got %r" % (
            name, ", ".join(repr(m) for m in PRECISION_MODES), value))
    return value


def _may_reuse():
    """True when a rounding may serve another reader, or be taken as already rounded: in
    saturation mode on the emulation (a saturated rounding is finite and in range, so rounding it
    again changes no value and sets no register word), without overflow localisation (which
    notes a site per rounding: one rounding less would be one note less)."""
    return (not localisation.enabled() and not emulation.is_inf_nan_enabled()
            and emulation._device_plugin() is None)  # pylint: disable=protected-access


def round_to(tensor, dtype, saturate):
    """``tensor`` rounded to ``dtype`` (saturated through the emulated register when ``saturate``
    and the dtype is float16), handed back in its own dtype."""
    if saturate and dtype == tf.float16:
        out = emulation.round_to_float16(tensor)
    else:
        out = tf.cast(tf.cast(tensor, dtype), tensor.dtype)
    if saturate and not tf.executing_eagerly() and _may_reuse():
        saturate_lib.mark_rounded(out, dtype)
    return out


def round_operand(tensor, dtype, shared=None):
    """``tensor`` as an operand rounded to ``dtype`` with saturation: ``tensor`` itself when it is
    already such a rounding (a cube op reading another's rounded result, or a gradient op reading
    the rounded operand of its forward op), else a new :func:`round_to`, or — with ``shared``,
    a dict the caller keeps for one rewrite of one graph in one mode — the rounding already made
    there of the same tensor, dtype and control-flow context (one rounding per value, not one per
    reader; the context is the graph's current one, where the rounding is built). Reuse happens only where :func:`_may_reuse` says it changes nothing."""
    if tf.executing_eagerly() or not _may_reuse():
        return round_to(tensor, dtype, saturate=True)
    if saturate_lib.rounded_to(tensor) == dtype:
        return tensor
    if shared is None:
        return round_to(tensor, dtype, saturate=True)
    key = (saturate_lib.ref(tensor), dtype, tensor.graph._get_control_flow_context())  # pylint: disable=protected-access
    if key not in shared:
        shared[key] = round_to(tensor, dtype, saturate=True)
    return shared[key]


@contextlib.contextmanager
def handled_ops(graph):
    """The set of op names of ``graph`` already handled (never rounded again), held locked."""
    with _lock:
        yield _done.setdefault(graph, set())
