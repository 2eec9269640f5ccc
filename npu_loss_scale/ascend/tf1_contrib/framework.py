"""``tf.contrib.framework``, ``rnn``, ``compiler.xla``, ``cudnn_rnn`` (constants) and
``learn.monitors``: the small pieces GNMT- and BERT-style scripts import at their top."""
import importlib

import tensorflow as tf

from npu_loss_scale.ascend.tf1_contrib._namespace import _ns


def with_same_shape(expected_tensor, tensor):
    """contrib.framework's ``tensor_util.with_same_shape``: ``tensor``, checked to have the shape
    of ``expected_tensor`` (a ValueError when both static shapes are known and differ, else an
    assertion run with it), its static shape merged with the expected one."""
    v1 = tf.compat.v1
    tensor = v1.convert_to_tensor(tensor)
    expected_tensor = v1.convert_to_tensor(expected_tensor)
    expected, actual = expected_tensor.get_shape(), tensor.get_shape()
    if expected.is_fully_defined() and actual.is_fully_defined():
        if expected != actual:
            raise ValueError("Invalid shape for tensor %s, expected %s, got %s."
                             % (tensor.name, expected, actual))
        return tensor
    with v1.name_scope("%s/" % tensor.op.name, values=[expected_tensor, tensor]):
        check = v1.assert_equal(v1.shape(tensor), v1.shape(expected_tensor),
                                message="Wrong shape for %s" % tensor.name)
        with v1.control_dependencies([check]):
            out = v1.identity(tensor)
    out.set_shape(actual.merge_with(expected))
    return out


def _xla_module():
    try:
        return [importlib.import_module("tensorflow.python.compiler.xla.xla")]
    except ImportError:
        return []


_CUDNN_CONSTANTS = dict(CUDNN_RNN_UNIDIRECTION="unidirectional",
                        CUDNN_RNN_BIDIRECTION="bidirectional", CUDNN_LSTM="lstm",
                        CUDNN_GRU="gru", CUDNN_RNN_RELU="rnn_relu", CUDNN_RNN_TANH="rnn_tanh",
                        CUDNN_INPUT_LINEAR_MODE="linear_input",
                        CUDNN_INPUT_SKIP_MODE="skip_input", CUDNN_INPUT_AUTO_MODE="auto_select")


def _cudnn_rnn():
    """``tf.contrib.cudnn_rnn`` (and ``...python.layers.cudnn_rnn``): the constants only; the
    cuDNN layers are GPU kernels, not mapped (their names raise the not-mapped error)."""
    path = "tensorflow.contrib.cudnn_rnn.python"
    layers_module = _ns(path + ".layers.cudnn_rnn", **_CUDNN_CONSTANTS)
    python = _ns(path, layers=_ns(path + ".layers", cudnn_rnn=layers_module))
    return _ns("tf.contrib.cudnn_rnn", python=python, **_CUDNN_CONSTANTS)


def _nest():
    """``tf.contrib.framework.nest``: TF 1.15's ``tensorflow.python.util.nest``, whose
    ``is_sequence`` TF 2.x renamed ``is_nested``; the other names are TF 2.x's."""
    from tensorflow.python.util import nest  # pylint: disable=import-outside-toplevel
    return _ns("tf.contrib.framework.nest", lambda: [tf.nest, nest], is_sequence=tf.nest.is_nested)


def _rnn_cell():
    try:  # TF 2.21 (Keras 3) has no v1 RNN cells: looking them up fails with an ImportError
        return [tf.compat.v1.nn.rnn_cell]
    except (ImportError, AttributeError):
        return []


def _v1_nn(name):
    try:
        return getattr(tf.compat.v1.nn, name)
    except (ImportError, AttributeError):
        return None


def replace_monitors_with_hooks(monitors_or_hooks, estimator):  # pylint: disable=unused-argument
    """``tf.contrib.learn.monitors.replace_monitors_with_hooks``: the list unchanged when it holds
    session-run hooks only; contrib.learn's monitors themselves are not mapped (an error names
    any that is not a hook)."""
    hooks = list(monitors_or_hooks or [])
    for hook in hooks:
        if not isinstance(hook, tf.compat.v1.train.SessionRunHook):
            raise TypeError("tf.contrib.learn.monitors.replace_monitors_with_hooks: %r is not a "
                            "SessionRunHook; contrib.learn's monitors are not mapped to "
                            "TensorFlow 2 by the TF1 mode of npu_loss_scale.emulate" % (hook,))
    return hooks


__all__ = ["with_same_shape", "replace_monitors_with_hooks"]
