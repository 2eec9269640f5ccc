"""The models' gelu activation: the device's FastGelu when the adapter offers no ops.gelu."""
import tensorflow as tf
from tensorflow.python.framework import ops

import npu_device
from npu_device.npu_device import gen_npu_ops as npu_aicore_ops


def _fast_gelu_grad(op, grad):
    return [npu_aicore_ops.fast_gelu_grad(grad, op.inputs[0])]


if not hasattr(npu_device.ops, "gelu") and "FastGelu" not in ops.gradient_registry.list():
    ops.RegisterGradient("FastGelu")(_fast_gelu_grad)


def gelu(x):
    if hasattr(npu_device.ops, "gelu"):
        return npu_device.ops.gelu(x)
    return npu_device.gen_npu_ops.fast_gelu(x)


def fast_gelu(x):
    return npu_aicore_ops.fast_gelu(tf.convert_to_tensor(x))
