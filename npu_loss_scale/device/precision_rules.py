"""What each ``precision_mode`` does to which ops, shared by the two ways the emulation applies it
(:mod:`npu_loss_scale.device.precision` when a TF1 session is made,
:mod:`npu_loss_scale.device.op_precision` when a TF2 op is built or run): the op types, the
operand and result dtypes per mode, the rounding with saturation, and the record of the ops of
a graph already handled, so that neither path rounds an op twice."""
import contextlib
import threading
import weakref

import tensorflow as tf

from npu_loss_scale.device import register as emulation
from npu_loss_scale.device.precision_modes import PRECISION_MODES

__all__ = ["CUBE_OPS", "FORCE_FP16_OPS", "RULES", "check_precision_mode", "round_to",
           "handled_ops"]

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


def round_to(tensor, dtype, saturate):
    """``tensor`` rounded to ``dtype`` (saturated through the emulated register when ``saturate``
    and the dtype is float16), handed back in its own dtype."""
    low = tf.cast(tensor, dtype)
    if saturate and dtype == tf.float16:
        low = emulation.saturate(low)
    return tf.cast(low, tensor.dtype)


@contextlib.contextmanager
def handled_ops(graph):
    """The set of op names of ``graph`` already handled (never rounded again), held locked."""
    with _lock:
        yield _done.setdefault(graph, set())
