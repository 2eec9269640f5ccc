"""The Ascend ``precision_mode`` on CPU: eligible ops compute in float16, with saturation.

On the device, scripts do not cast their model to float16: they set ``precision_mode`` in the
session config (``custom_op.parameter_map["precision_mode"].s = b"allow_mix_precision"`` on the
``NpuOptimizer`` custom optimizer), in ``NPURunConfig(precision_mode=...)`` or in
``npu_device.global_options()``, and the graph compiler runs the eligible ops in float16. A CPU
run of the same script is float32 and never overflows, so the loss scaler is never exercised.

:func:`apply_precision_mode` does on a built graph what the compiler does on the device, for the
ops where it matters for loss scaling — the *cube* ops, matrix multiplications and convolutions,
forward and backward: each float32 input is rounded to float16 (a value beyond ±65504 becomes
inf) and each float32 output is rounded to float16 and saturated through
:func:`npu_loss_scale.device.register.saturate` (in saturation mode: ±65504, NaN→0 and the emulated
float-status register set; in INF/NaN mode IEEE inf/NaN), then handed back as float32 to the
ops that consumed it. That is what the Ascend cube unit does: float16 operands, float32
accumulation, a float16 result. It serves TF1 code: sessions apply it when they are created
(:func:`install_session_hook`); ops inside ``tf.function`` bodies or functional control flow
(TF2 ``While``/``If``) of such a graph are not rewritten.

For TF2 code (``npu_device.global_options().precision_mode`` then ``npu_device.open()``, or
``emulate --precision-mode`` without ``--tf1``), :func:`install_op_precision` applies the same
rule when an op is made: in every function graph as it is traced (``tf.function``, Keras
``fit``, ``tf.data`` functions, ``While``/``If`` bodies, gradient functions) and around every
op run eagerly, in every thread. The float-status register sees the saturations of both paths
alike.

Per mode (the names the device accepts; anything else is a ValueError):

=========================== ============================================================
``allow_fp32_to_fp16``      cube ops in float16 (the device's cube unit has no float32; the
                            device's default for training)
``allow_mix_precision``,    cube ops in float16 (they are on the device's float16 allow list).
``allow_mix_precision_fp16`` Gray-list ops that would follow a float16 input on the device
                            (bias add, activations) stay float32 here: their consumers in the
                            script's graph expect float32.
``force_fp16``              cube ops and element-wise arithmetic/activation ops
                            (:data:`FORCE_FP16_OPS`) in float16
``cube_fp16in_fp32out``     cube ops take float16 operands, keep a float32 result
``force_fp32``,             nothing is cast: float32 stays float32 (ops the script builds in
``must_keep_origin_dtype``  float16 stay float16)
``allow_mix_precision_bf16``, cube ops with bfloat16 operands and result (no overflow: bfloat16
``allow_fp32_to_bf16``,     has float32's range)
``force_lowerprecision``
=========================== ============================================================

Example::

    with tf.Graph().as_default() as g:
        y = tf.matmul(x, w)                     # built in float32
        apply_precision_mode(g, "allow_mix_precision")
        # y is now the float16 product, saturated, as float32
"""
import contextlib
import threading
import weakref

import tensorflow as tf

from npu_loss_scale.device import register as emulation
from npu_loss_scale._internal.compat import tape
from npu_loss_scale._internal.compat.scripts import NATIVE_TF1
from npu_loss_scale.device.precision_modes import PRECISION_MODES

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
_RULES = {
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


def precision_mode_of(config):
    """The ``precision_mode`` a session ``ConfigProto`` asks the NpuOptimizer for, or None."""
    if config is None:
        return None
    try:
        custom = config.graph_options.rewrite_options.custom_optimizers
    except AttributeError:
        return None
    for optimizer in custom:
        if optimizer.name == "NpuOptimizer" and "precision_mode" in optimizer.parameter_map:
            return check_precision_mode(optimizer.parameter_map["precision_mode"].s,
                                        'parameter_map["precision_mode"]')
    return None


def _round(tensor, dtype, saturate):
    low = tf.cast(tensor, dtype)
    if saturate and dtype == tf.float16:
        low = emulation.saturate(low)
    return tf.cast(low, tensor.dtype)


def apply_precision_mode(graph, mode):
    """Rewrites the eligible float32 ops of ``graph`` to compute as ``mode`` does on the device.

    Idempotent: ops handled once are not handled again, so calling it at every session creation
    only touches ops added since. Returns the number of ops rewritten.
    """
    mode = check_precision_mode(mode)
    op_types, operand_dtype, result_dtype = _RULES[mode]
    if not op_types:
        return 0
    with _lock:
        done = _done.setdefault(graph, set())
        existing = graph.get_operations()
        todo = [op for op in existing if op.type in op_types and op.name not in done]
        if not todo:
            return 0
        finalized = graph.finalized
        if finalized:
            graph._unsafe_unfinalize()  # pylint: disable=protected-access
        try:
            count = 0
            for op in todo:
                done.add(op.name)
                if _rewrite(graph, op, operand_dtype, result_dtype):
                    count += 1
        finally:
            # the ops the rewrites added (casts, saturation) are never rewritten in their turn;
            # found once per call, not once per rewritten op: a large graph (tens of thousands of
            # ops, thousands of them cube ops) would otherwise take quadratic time
            existing = set(op.name for op in existing)
            done.update(op.name for op in graph.get_operations() if op.name not in existing)
            if finalized:
                graph.finalize()
    return count


def _rewrite(graph, op, operand_dtype, result_dtype):
    floats = [i for i, t in enumerate(op.inputs) if t.dtype == tf.float32]
    outputs = [t for t in op.outputs if t.dtype == tf.float32]
    if not floats and not outputs:
        return False
    context = op._get_control_flow_context()  # pylint: disable=protected-access
    previous = graph._get_control_flow_context()  # pylint: disable=protected-access
    graph._set_control_flow_context(context)  # pylint: disable=protected-access
    try:
        with graph.as_default(), tf.name_scope(op.name + "_precision"):
            for i in floats:
                op._update_input(i, _round(op.inputs[i], operand_dtype, saturate=True))  # pylint: disable=protected-access
            if result_dtype is not None:
                for out in outputs:
                    consumers = [(c, j) for c in out.consumers()
                                 for j, t in enumerate(c.inputs) if t is out]
                    if not consumers:
                        continue
                    rounded = _round(out, result_dtype, saturate=True)
                    for consumer, j in consumers:
                        consumer._update_input(j, rounded)  # pylint: disable=protected-access
    finally:
        graph._set_control_flow_context(previous)  # pylint: disable=protected-access
    return True


# -- session creation ------------------------------------------------------------------------------
_default_mode = [None]
_patched = []


def set_default_precision_mode(mode):
    """The mode sessions use when their config names none (``emulate --precision-mode``)."""
    _default_mode[0] = None if mode is None else check_precision_mode(mode)


def install_session_hook():
    """Makes every new ``tf.compat.v1.Session`` apply the precision mode of its config.

    Installed by ``python -m npu_loss_scale.emulate`` only: the device applies the mode when the
    graph is compiled for a session, so the emulation applies it when a session is created and
    again, to the ops added since, whenever the session brings its runtime up to date with the
    graph (each ``run`` or callable after the graph grew). The second point matters for Keras
    scripts, which make their session (``set_keras_session_npu_config``) before building the model.
    """
    if _patched:
        return
    from tensorflow.python.client import (  # pylint: disable=import-outside-toplevel
        session as session_lib)
    original = session_lib.BaseSession.__init__
    original_extend = session_lib.BaseSession._extend_graph  # pylint: disable=protected-access

    def __init__(self, target="", graph=None, config=None):
        mode = precision_mode_of(config) or _default_mode[0]
        if mode is not None:
            apply_precision_mode(graph if graph is not None else tf.compat.v1.get_default_graph(),
                                 mode)
        self._npu_precision = [mode, None]  # pylint: disable=protected-access
        original(self, target, graph, config)

    def _extend_graph(self):
        state = getattr(self, "_npu_precision", None)
        if state is not None and state[0] is not None:
            version = self._graph.version  # pylint: disable=protected-access
            if version != state[1]:
                apply_precision_mode(self._graph, state[0])  # pylint: disable=protected-access
                state[1] = self._graph.version  # pylint: disable=protected-access
        return original_extend(self)

    session_lib.BaseSession.__init__ = __init__
    session_lib.BaseSession._extend_graph = _extend_graph  # pylint: disable=protected-access
    _patched.append((session_lib.BaseSession, "__init__", original))
    _patched.append((session_lib.BaseSession, "_extend_graph", original_extend))


def uninstall_session_hook():
    while _patched:
        cls, name, original = _patched.pop()
        setattr(cls, name, original)


# -- TF2: ops built in tf.function / Keras graphs, and ops run eagerly ------------------------------
class _OpRule:
    """What the active mode does to an op: its types, operand dtype and result dtype."""

    def __init__(self, mode):
        self.mode = mode
        self.types, self.operand, self.result = _RULES[mode]
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
    return getattr(_op_guard, "depth", 0) > 0


def _built_op(op, outputs, rule):
    """A cube op just built in a graph: float32 operands rounded in place, outputs replaced."""
    graph = op.graph
    floats = [i for i, t in enumerate(op.inputs) if t.dtype == tf.float32]
    if not floats and not any(t.dtype == tf.float32 for t in outputs):
        return outputs
    with _Guard(), graph.as_default(), graph.name_scope(op.name + "_precision/"):
        for i in floats:
            op._update_input(i, _round(op.inputs[i], rule.operand, saturate=True))  # pylint: disable=protected-access
        if rule.result is not None:
            outputs = [_round(t, rule.result, saturate=True) if t.dtype == tf.float32 else t
                       for t in outputs]
    with _lock:
        _done.setdefault(graph, set()).add(op.name)   # a session's rewrite leaves it alone
    rule.rewritten += 1
    return list(outputs)


def _run_op(run, op_name, num_outputs, inputs, attrs, ctx, name, rule):
    """A cube op run eagerly: float32 operands and results rounded as the device does."""
    with _Guard(), tape.stop_recording():
        inputs = [_round(t, rule.operand, saturate=True) if t.dtype == tf.float32 else t
                  for t in inputs]
        outputs = run(op_name, num_outputs, inputs, attrs, ctx, name)
        if rule.result is not None:
            outputs = [_round(t, rule.result, saturate=True) if t.dtype == tf.float32 else t
                       for t in outputs]
    rule.rewritten += 1
    return outputs


def install_op_precision(mode):
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
    mode that casts nothing (``force_fp32``, ``must_keep_origin_dtype``) installs nothing.
    TensorFlow 1.x has no TF2 code to act on (its ``tf.compat.v1`` graphs are the sessions'):
    there it raises ``NotImplementedError``.
    """
    mode = check_precision_mode(mode)
    if NATIVE_TF1:
        raise NotImplementedError(
            "install_op_precision(%r) applies precision_mode to TF2 code (eager ops and "
            "tf.function graphs), as npu_device does; TensorFlow %s runs TF1 graphs, whose "
            "sessions apply it: use set_default_precision_mode(%r) with install_session_hook() "
            "(python -m npu_loss_scale.emulate and the pytest plugin's npu_device do)"
            % (mode, tf.__version__, mode))
    rule = _OpRule(mode)
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
def op_precision(mode):
    """Context manager: :func:`install_op_precision` inside, the previous state after.

    Example::

        with op_precision("allow_mix_precision"):
            y = tf.matmul(tf.constant([[300.0]]), tf.constant([[300.0]]))   # eager: 65504.0
    """
    previous = op_precision_mode()
    install_op_precision(mode)
    try:
        yield
    finally:
        uninstall_op_precision()
        if previous is not None:
            install_op_precision(previous)


__all__ = [
    "CUBE_OPS", "FORCE_FP16_OPS", "check_precision_mode", "precision_mode_of",
    "apply_precision_mode", "set_default_precision_mode", "install_session_hook",
    "uninstall_session_hook", "install_op_precision", "uninstall_op_precision",
    "op_precision_mode", "op_precision",
]
