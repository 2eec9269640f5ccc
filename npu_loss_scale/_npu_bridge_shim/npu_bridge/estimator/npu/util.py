"""Shim of ``npu_bridge.estimator.npu.util``: iterations per loop and the adapter's value store.

``set_iteration_per_loop(sess, train_op, N)`` returns an op (``IterationOp``) one
``sess.run`` of which runs ``train_op`` N times, as on the device (N steps per call: global step
advances by N). The loop is carried out by the session-run hook of
:mod:`npu_loss_scale.ascend.loops`, installed on first use.
"""
import numbers

import tensorflow as tf

from npu_loss_scale.ascend import loops
from npu_bridge._shim import module_getattr as _module_getattr

_values = {}


def check_positive_integer(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an int; got %r (type %s)" % (name, value, type(value).__name__))
    if value <= 0:
        raise ValueError("%s must be positive; got %r" % (name, value))


def check_nonnegative_integer(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an int; got %r (type %s)" % (name, value, type(value).__name__))
    if value < 0:
        raise ValueError("%s must be nonnegative; got %r" % (name, value))


def set_iteration_per_loop(sess, train_op, iterations_per_loop=1):
    """An op running ``train_op`` ``iterations_per_loop`` times per ``sess.run``."""
    if not isinstance(train_op, tf.Operation):
        raise TypeError("train_op must be a tf.Operation (for example optimizer.minimize(...)); "
                        "got %r (type %s)" % (train_op, type(train_op).__name__))
    check_positive_integer(iterations_per_loop, "iterations_per_loop")
    if iterations_per_loop == 1:
        return train_op
    with train_op.graph.as_default():
        loop_op = tf.group(train_op, name="IterationOp")
    loops.install_run_hook()
    return loops.mark_loop(loop_op, iterations_per_loop)


class IterationPerLoop:
    """Two-step form: create the loop op, then set N with a session."""

    def __init__(self):
        self._op = None

    def create_iteration_per_loop_var(self, train_op):
        if not isinstance(train_op, tf.Operation):
            raise TypeError("train_op must be a tf.Operation; got %r" % (train_op,))
        with train_op.graph.as_default():
            self._op = tf.group(train_op, name="IterationOp")
        return self._op

    def load_iteration_per_loop_var(self, sess, iterations_per_loop=1):  # pylint: disable=unused-argument
        check_positive_integer(iterations_per_loop, "iterations_per_loop")
        if self._op is None:
            raise ValueError("call create_iteration_per_loop_var(train_op) first")
        loops.install_run_hook()
        loops.mark_loop(self._op, iterations_per_loop)


def variable_initializer_in_host(var_list):
    """The initializer of ``var_list`` (there is no separate host on CPU)."""
    return tf.compat.v1.variables_initializer(var_list, name="var_in_host")


def set_graph_exec_config(fetch, dynamic_input=False, dynamic_graph_execute_mode="dynamic_execute",
                          dynamic_inputs_shape_range=None):  # pylint: disable=unused-argument
    """``fetch`` unchanged: dynamic-shape compilation settings have no meaning on CPU."""
    if dynamic_graph_execute_mode not in ("lazy_recompile", "dynamic_execute"):
        raise ValueError("dynamic_graph_execute_mode must be 'lazy_recompile' or "
                         "'dynamic_execute'; got %r" % (dynamic_graph_execute_mode,))
    return fetch


def global_dict_init():
    _values.clear()


def set_value(key, value):
    _values[key] = value


def get_value(key, def_value=None):
    return _values.get(key, def_value)


__all__ = ["set_iteration_per_loop", "IterationPerLoop", "variable_initializer_in_host",
           "set_graph_exec_config", "global_dict_init", "set_value", "get_value",
           "check_positive_integer", "check_nonnegative_integer"]
__getattr__ = _module_getattr(__name__, __all__)
