"""``update()``'s argument for Megatron's scalers: Megatron's ``found_inf`` flag, or TensorFlow's
gradients.

Megatron calls ``scaler.update(found_inf)`` with a one-element float32 tensor (nonzero = the step
overflowed); TensorFlow's ``LossScale.update(grads)`` passes the step's gradients and expects
``(update_op, should_apply_gradients)``. :func:`dispatching_update` wraps a subclass's
``update(found_inf)`` so that one method answers both: a flag of any accepted form reaches it as a
Python bool or a scalar bool tensor, gradients go to the manager's ``update(grads)``
(:meth:`npu_loss_scale.scaling.base.LossScaleManager.update`). Anything else is refused with a
``TypeError`` naming ``found_inf`` and what is accepted (:data:`FOUND_INF_ACCEPTED`).
"""
import functools

import numpy as np
import tensorflow as tf

from npu_loss_scale.scaling.base import LossScaleManager

__all__ = ["FOUND_INF_ACCEPTED", "dispatching_update", "found_inf_flag"]


FOUND_INF_ACCEPTED = (
    "found_inf (Megatron's overflow flag; nonzero = the step overflowed) is a Python bool, a "
    "Python int 0 or 1, a NumPy bool, integer or float scalar, or a bool or numeric (integer "
    "or floating) tensor or array with exactly one element, such as Megatron's float32 found_inf of shape "
    "[1]; TensorFlow's gradients go in a list, tuple or dict")


def _found_inf_error(value, why=""):
    return TypeError("update(): %s; got %r (type %s)%s"
                     % (FOUND_INF_ACCEPTED, value, type(value).__name__, why))


def _flag_dtype_ok(dtype):
    return dtype == tf.bool or dtype.is_integer or dtype.is_floating


def _as_found_inf(value):
    """Megatron's ``found_inf`` as a Python bool or a scalar bool tensor.

    Returns None when ``value`` is TensorFlow's gradients (a list, tuple, dict or other nested
    structure); raises TypeError when it is neither (see :data:`FOUND_INF_ACCEPTED`)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, int):                       # a Python int, not a bool (handled above)
        if value in (0, 1):
            return bool(value)
        raise _found_inf_error(value, " (a Python int is a flag only as 0 or 1)")
    if isinstance(value, np.generic):
        if np.issubdtype(value.dtype, np.integer) or np.issubdtype(value.dtype, np.floating):
            return bool(value != 0)
        raise _found_inf_error(value)
    if isinstance(value, np.ndarray):
        if not (value.dtype == np.bool_ or np.issubdtype(value.dtype, np.integer)
                or np.issubdtype(value.dtype, np.floating)):
            raise _found_inf_error(value)
        if value.size != 1:
            raise _found_inf_error(value, " (an array of %d elements)" % value.size)
        return bool(value.reshape(()) != 0)
    if isinstance(value, (tf.Tensor, tf.Variable)):
        tensor = tf.convert_to_tensor(value)
        if not _flag_dtype_ok(tensor.dtype):
            raise _found_inf_error(value)
        size = tensor.shape.num_elements()
        if size is not None and size != 1:
            raise _found_inf_error(value, " (a tensor of %d elements)" % size)
        if size is None:   # graph mode, shape not known yet: checked when it runs
            check = tf.debugging.assert_equal(
                tf.size(tensor), 1, message="update(): found_inf must have exactly one element")
            with tf.control_dependencies([check]):
                tensor = tf.identity(tensor)
        tensor = tf.reshape(tensor, [])
        if tensor.dtype != tf.bool:
            tensor = tf.not_equal(tensor, tf.zeros([], tensor.dtype))
        return tensor
    if tf.nest.is_nested(value):
        return None
    raise _found_inf_error(value)


def found_inf_flag(found_inf):
    """A scalar bool tensor from anything :func:`_as_found_inf` takes as ``found_inf``."""
    flag = _as_found_inf(found_inf)
    if flag is None:
        raise _found_inf_error(found_inf)
    return tf.convert_to_tensor(flag, dtype=tf.bool)


def dispatching_update(method):
    """Wraps a Megatron-style ``update(found_inf)`` so TensorFlow's ``update(grads)`` works too.

    ``found_inf`` reaches ``method`` as a Python bool or a scalar bool tensor."""

    @functools.wraps(method)
    def update(self, found_inf_or_grads):
        flag = _as_found_inf(found_inf_or_grads)
        if flag is not None:
            return method(self, flag)
        # TensorFlow's LossScale.update(grads): returns (update_op, should_apply_gradients).
        return LossScaleManager.update(self, found_inf_or_grads)

    update._npu_loss_scale_dispatch = True  # pylint: disable=protected-access
    return update
