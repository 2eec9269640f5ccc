"""The Ascend ``precision_mode`` for TF2 code on CPU, applied when an op is made: in every function
graph as it is traced (``tf.function``, Keras ``fit``, ``tf.data`` functions, ``While``/``If``
bodies, gradient functions) and around every op run eagerly, in every thread — what
``npu_device.open()`` does on the device. The rules are those of
:mod:`npu_loss_scale.device.precision`, which applies them to TF1 graphs when a session is made
(see its docstring for the modes)."""
import contextlib
import threading

import tensorflow as tf

from npu_loss_scale._internal.compat import tape
from npu_loss_scale._internal.compat.scripts import NATIVE_TF1
from npu_loss_scale.device import precision_lists
from npu_loss_scale.device.precision_modes import plain_run
from npu_loss_scale.device.precision_rules import RULES, check_precision_mode, handled_ops, \
    rewrite_counters, round_operand, round_to

__all__ = ["install_op_precision", "uninstall_op_precision", "op_precision_mode", "op_precision"]


class _OpRule:
    """What the active mode does to an op: its types, operand dtype and result dtype."""

    def __init__(self, mode, mixlist=None):
        self.mode = mode
        mode_types, self.operand, self.result = RULES[mode]
        self.types = precision_lists.lowered_types(mode, mode_types, mixlist)
        self.mixlist = mixlist
        self.byte_types = frozenset(t.encode() for t in self.types)
        self.rewritten = 0   # ops built or run with the mode so far (for tests and curiosity)


_op_rule = [None]          # the rule of install_op_precision(), or None
_op_patched = []           # (module, attribute, original, patched)
_op_guard = threading.local()


class _Guard:
    """Marks this thread as building the rounding of an op: those ops are never rewritten."""

    def __enter__(self):
        _op_guard.depth = getattr(_op_guard, "depth", 0) + 1

    def __exit__(self, *exc):
        _op_guard.depth -= 1


def _guarded():
    """Whether this thread's ops are left as built: while it builds a rounding, or inside
    ``keep_dtype_scope()`` (:func:`~npu_loss_scale.device.precision_lists.keeping_dtype`)."""
    return getattr(_op_guard, "depth", 0) > 0 or precision_lists.keeping_dtype_now()


def _built_op(op, outputs, rule):
    """A cube op just built in a graph: float32 operands rounded in place, outputs replaced."""
    graph = op.graph
    floats = [i for i, t in enumerate(op.inputs) if t.dtype == tf.float32]
    if not floats and not any(t.dtype == tf.float32 for t in outputs):
        return outputs
    with _Guard(), graph.as_default(), graph.name_scope(op.name + "_precision/"):
        for i in floats:   # a rounded value (a gradient op reading its forward op's) as it is
            op._update_input(i, round_operand(op.inputs[i], rule.operand))  # pylint: disable=protected-access
        if rule.result is not None:
            outputs = [round_to(t, rule.result, saturate=True) if t.dtype == tf.float32 else t
                       for t in outputs]
    with handled_ops(graph) as done:
        done.add(op.name)   # a session's rewrite leaves it alone
    rule.rewritten += 1
    rewrite_counters.traced_ops += 1
    return list(outputs)


def _run_op(run, op_name, num_outputs, inputs, attrs, ctx, name, rule):
    """A cube op run eagerly: float32 operands and results rounded as the device does."""
    with _Guard(), tape.stop_recording():
        inputs = [round_to(t, rule.operand, saturate=True) if t.dtype == tf.float32 else t
                  for t in inputs]
        outputs = run(op_name, num_outputs, inputs, attrs, ctx, name)
        if rule.result is not None:
            outputs = [round_to(t, rule.result, saturate=True) if t.dtype == tf.float32 else t
                       for t in outputs]
    rule.rewritten += 1
    rewrite_counters.eager_ops += 1
    return outputs


def install_op_precision(mode, modify_mixlist=None):
    """Makes every eligible op of TF2 code built or run from now on compute as ``mode`` does on
    the device — what ``npu_device.open()`` does.

    Where :func:`install_session_hook` rewrites a ``tf.compat.v1`` graph when a session is
    created (TF1 code), this acts when an op is made: an op built in a function graph
    (``tf.function`` tracing, Keras ``fit``/``predict``, ``tf.data`` functions, TF2 control-flow
    bodies, gradient functions) gets its float32 operands rounded to ``mode``'s dtype (with
    saturation) and its float32 outputs replaced by their rounding, exactly as
    :func:`apply_precision_mode` does; an op run eagerly gets the same rounding around its
    kernel. The gradient recorded for the op is the op's own (its backward cube ops are rounded
    in their turn), as in the session path. Ops of ``tf.compat.v1`` graphs are left to their
    sessions (a session config can name its own mode). Process-wide (every thread), until
    :func:`uninstall_op_precision`. Ops built before the call are not changed (the device
    applies its options when it is opened, before the model is built). Returns the mode; a
    mode that casts nothing (``force_fp32``, ``must_keep_origin_dtype``) installs nothing, and
    so does a plain run (``npu-emulate --plain``:
    :func:`~npu_loss_scale.device.precision_modes.plain_run`).
    TensorFlow 1.x has no TF2 code to act on (its ``tf.compat.v1`` graphs are the sessions'):
    there it raises ``NotImplementedError``. ``modify_mixlist`` (a JSON file's path, a dict of
    its shape, or None for the process-wide one) changes the op types a mixed mode lowers; ops
    built in ``keep_dtype_scope()`` inside a function keep their dtype
    (:mod:`npu_loss_scale.device.precision_lists`).
    """
    mode = check_precision_mode(mode)
    if NATIVE_TF1:
        raise NotImplementedError(
            "install_op_precision(%r) applies precision_mode to TF2 code (eager ops and "
            "tf.function graphs), as npu_device does; TensorFlow %s runs TF1 graphs, whose "
            "sessions apply it: use set_default_precision_mode(%r) with install_session_hook() "
            "(python -m npu_loss_scale.emulate and the pytest plugin's npu_device do)"
            % (mode, tf.__version__, mode))
    if plain_run():
        return mode
    rule = _OpRule(mode, precision_lists.default_modify_mixlist() if modify_mixlist is None
                   else precision_lists.load_modify_mixlist(modify_mixlist))
    uninstall_op_precision()
    if not rule.types:
        return mode
    from tensorflow.python import pywrap_tfe  # pylint: disable=import-outside-toplevel
    from tensorflow.python.eager import core, execute  # pylint: disable=import-outside-toplevel
    from tensorflow.python.framework import (  # pylint: disable=import-outside-toplevel
        func_graph, op_def_library)

    apply_op = op_def_library._apply_op_helper  # pylint: disable=protected-access
    fast_path = pywrap_tfe.TFE_Py_FastPathExecute
    quick = execute.quick_execute

    def _apply_op_helper(op_type_name, name=None, **keywords):
        result = apply_op(op_type_name, name=name, **keywords)
        active = _op_rule[0]
        if active is None or op_type_name not in active.types or _guarded():
            return result
        structure, stateful, op, outputs = result
        if not isinstance(op.graph, func_graph.FuncGraph):
            return result   # a tf.compat.v1 graph: its sessions apply their config's mode
        if precision_lists.keeps_dtype(op):
            return result   # built in keep_dtype_scope()
        return structure, stateful, op, _built_op(op, outputs, active)

    def fast_path_execute(ctx, op_name, *args):
        active = _op_rule[0]
        if active is not None and op_name in active.types and not _guarded():
            # the op's generated function then runs it through execute.quick_execute below
            raise core._FallbackException("npu_loss_scale precision_mode %s" % active.mode)  # pylint: disable=protected-access
        return fast_path(ctx, op_name, *args)

    def quick_execute(op_name, num_outputs, inputs, attrs, ctx, name=None):
        active = _op_rule[0]
        if (active is None or _guarded()
                or (op_name not in active.byte_types and op_name not in active.types)):
            return quick(op_name, num_outputs, inputs, attrs, ctx, name)
        return _run_op(quick, op_name, num_outputs, inputs, attrs, ctx, name, active)

    _patch(op_def_library, "_apply_op_helper", _apply_op_helper)
    _patch(pywrap_tfe, "TFE_Py_FastPathExecute", fast_path_execute)
    # execute.execute is quick_execute unless op callbacks are on (then execute_with_callbacks,
    # which calls quick_execute by name); removing the last callback sets it back to
    # execute.quick_execute, which is then this one
    _patch(execute, "quick_execute", quick_execute)
    if execute.execute is quick:
        execute.execute = quick_execute
    _op_rule[0] = rule
    return mode


def uninstall_op_precision():
    """Undoes :func:`install_op_precision` (ops already built keep their rounding)."""
    _op_rule[0] = None
    while _op_patched:
        module, attribute, original, patched = _op_patched.pop()
        if attribute == "quick_execute" and module.execute is patched:
            module.execute = original
        if getattr(module, attribute) is patched:
            setattr(module, attribute, original)


def _patch(module, attribute, patched):
    _op_patched.append((module, attribute, getattr(module, attribute), patched))
    setattr(module, attribute, patched)


def op_precision_mode():
    """The mode :func:`install_op_precision` installed, or None."""
    rule = _op_rule[0]
    return None if rule is None else rule.mode


@contextlib.contextmanager
def op_precision(mode, modify_mixlist=None):
    """Context manager: :func:`install_op_precision` inside, the previous state after.

    Example::

        with op_precision("allow_mix_precision"):
            y = tf.matmul(tf.constant([[300.0]]), tf.constant([[300.0]]))   # eager: 65504.0
    """
    previous = _op_rule[0]
    install_op_precision(mode, modify_mixlist)
    try:
        yield
    finally:
        uninstall_op_precision()
        if previous is not None:
            install_op_precision(previous.mode, previous.mixlist)
