"""TensorFlow's op callbacks (every op created or run passes through a callback).

TensorFlow 2.x: ``add_op_callback`` / ``remove_op_callback``, used by
:func:`npu_loss_scale.saturation.saturate_every_op`. TensorFlow 1.15 has an earlier form of the
mechanism (one ``op_callback`` context manager) whose replaced outputs cut the graph that
``tf.gradients`` walks: gradients built inside come back None. Rather than train on missing
gradients, on 1.15 ``add_op_callback`` raises :class:`NotImplementedError` saying so.
"""
from tensorflow.python.framework import op_callbacks as _tf_op_callbacks

SUPPORTED = hasattr(_tf_op_callbacks, "add_op_callback")

if SUPPORTED:
    add_op_callback = _tf_op_callbacks.add_op_callback
    remove_op_callback = _tf_op_callbacks.remove_op_callback
else:
    def add_op_callback(callback):  # pylint: disable=unused-argument
        raise NotImplementedError(
            "saturate_every_op() is not available on TensorFlow 1.15: its op callbacks replace "
            "op outputs in a way tf.gradients cannot follow (the gradients come back None). "
            "Saturate chosen tensors with npu_loss_scale.saturate() or the Saturate layer.")

    def remove_op_callback(callback):  # pylint: disable=unused-argument
        raise NotImplementedError("saturate_every_op() is not available on TensorFlow 1.15")
