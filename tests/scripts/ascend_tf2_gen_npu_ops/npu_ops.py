"""A model's own copy of the adapter's dropout helpers, in the shape Ascend's TF2 ModelZoo models
vendor one (written for this test): dropout from the raw device kernels of
``npu_device.gen_npu_ops``, a gradient registered for each device op type, and kernels the
model never calls (referenced only inside functions, as in those copies)."""
import numbers

from tensorflow.python.eager import context
from tensorflow.python.framework import ops
from tensorflow.python.framework import random_seed
from tensorflow.python.framework import tensor_shape
from tensorflow.python.ops import array_ops

from npu_device import gen_npu_ops


def _seeds(op_seed):
    # (None, None) without any seed, as TF's get_seed; the op wrappers take None for 0
    return random_seed.get_seed(op_seed)


def _noise_shape(x, noise_shape):
    if noise_shape is None:
        return array_ops.shape(x)
    return tensor_shape.as_shape(noise_shape)


def dropout(x, keep_prob, noise_shape=None, seed=None, name=None):
    if context.executing_eagerly():
        raise RuntimeError("dropout() builds graph ops")
    x = ops.convert_to_tensor(x, name="x")
    if isinstance(keep_prob, numbers.Real) and not 0 < keep_prob <= 1:
        raise ValueError("keep_prob out of range: %g" % keep_prob)
    if isinstance(keep_prob, float) and keep_prob == 1:
        return x
    seed, seed2 = _seeds(seed)
    mask = gen_npu_ops.drop_out_gen_mask(_noise_shape(x, noise_shape), keep_prob, seed, seed2, name)
    return gen_npu_ops.drop_out_do_mask(x, mask, keep_prob, name)


def dropout_v3(x, keep_prob, noise_shape=None, seed=None, name=None):
    x = ops.convert_to_tensor(x, name="x")
    if isinstance(keep_prob, float) and keep_prob == 1:
        return x
    seed, seed2 = _seeds(seed)
    mask = gen_npu_ops.drop_out_gen_mask_v3(_noise_shape(x, noise_shape), keep_prob, seed, seed2,
                                            name)
    return gen_npu_ops.drop_out_do_mask_v3(x, mask, keep_prob, name)


def _do_mask_grad(op, grad):
    return [gen_npu_ops.drop_out_do_mask(grad, op.inputs[1], op.inputs[2]), None, None]


if "DropOutDoMask" not in ops.gradient_registry.list():
    ops.RegisterGradient("DropOutDoMask")(_do_mask_grad)


@ops.RegisterGradient("DropOutDoMaskV3")
def _do_mask_v3_grad(op, grad):
    return [gen_npu_ops.drop_out_do_mask_v3(grad, op.inputs[1], op.inputs[2]), None, None]


def lars_v2(weight, grad, weight_decay, learning_rate, name=None):
    return gen_npu_ops.lars_v2(input_weight=weight, input_grad=grad, weight_decay=weight_decay,
                               learning_rate=learning_rate, name=name)


@ops.RegisterGradient("BasicLSTMCell")
def _basic_lstm_cell_grad(op, *grads):
    return gen_npu_ops.basic_lstm_cell_input_grad(grads[0], op.inputs[3])
