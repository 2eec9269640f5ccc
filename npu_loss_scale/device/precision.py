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
import tensorflow as tf

from npu_loss_scale.device.op_precision import install_op_precision, op_precision, \
    op_precision_mode, uninstall_op_precision
from npu_loss_scale.device import precision_lists
from npu_loss_scale.device.precision_modes import PRECISION_MODES, plain_run
from npu_loss_scale.device.precision_rules import CUBE_OPS, FORCE_FP16_OPS, RULES, \
    check_precision_mode, handled_ops, rewrite_counters, round_operand, round_to


def precision_mode_of(config):
    """The ``precision_mode`` a session ``ConfigProto`` asks the NpuOptimizer for, or None."""
    value = precision_lists.npu_parameter(config, "precision_mode")
    if value is None:
        return None
    return check_precision_mode(value.s, 'parameter_map["precision_mode"]')


def apply_precision_mode(graph, mode, modify_mixlist=None):
    """Rewrites the eligible float32 ops of ``graph`` to compute as ``mode`` does on the device.

    ``modify_mixlist`` (a JSON file's path, a dict of its shape, or None for the process-wide
    one) changes the op types a mixed mode lowers; ops built in ``keep_dtype_scope()`` are left
    as built (:mod:`npu_loss_scale.device.precision_lists`). Idempotent: ops handled once are not
    handled again, so calling it at every session creation only touches ops added since.
    Returns the number of ops rewritten.
    """
    mode = check_precision_mode(mode)
    mode_types, operand_dtype, result_dtype = RULES[mode]
    mixlist = (precision_lists.default_modify_mixlist() if modify_mixlist is None
               else precision_lists.load_modify_mixlist(modify_mixlist))
    op_types = precision_lists.lowered_types(mode, mode_types, mixlist)
    if not op_types:
        return 0
    with handled_ops(graph) as done:
        rewrite_counters.scans += 1
        existing = graph.get_operations()
        todo = [op for op in existing if op.type in op_types and op.name not in done
                and not precision_lists.keeps_dtype(op)]
        if not todo:
            return 0
        finalized = graph.finalized
        if finalized:
            graph._unsafe_unfinalize()  # pylint: disable=protected-access
        try:
            count = 0
            rounded = {}
            for op in todo:
                done.add(op.name)
                if _rewrite(graph, op, operand_dtype, result_dtype, rounded):
                    count += 1
            rewrite_counters.rewrites += 1
            rewrite_counters.rewritten_ops += count
        finally:
            # the ops the rewrites added (casts, saturation) are never rewritten in their turn;
            # found once per call, not once per rewritten op: a large graph (tens of thousands of
            # ops, thousands of them cube ops) would otherwise take quadratic time
            existing = set(op.name for op in existing)
            done.update(op.name for op in graph.get_operations() if op.name not in existing)
            if finalized:
                graph.finalize()
    return count


def _rewrite(graph, op, operand_dtype, result_dtype, rounded):
    """Rounds ``op``'s float32 operands and results. ``rounded``: the roundings made in this call
    of :func:`apply_precision_mode` (one graph, one mode), shared by the ops that read the same
    value (a forward convolution and its filter gradient read the same activation, the two
    gradients of a convolution the same incoming gradient; see ``round_operand``)."""
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
                op._update_input(i, round_operand(op.inputs[i], operand_dtype, rounded))  # pylint: disable=protected-access
            if result_dtype is not None:
                for out in outputs:
                    consumers = [(c, j) for c in out.consumers()
                                 for j, t in enumerate(c.inputs) if t is out]
                    if not consumers:
                        continue
                    rounded = round_to(out, result_dtype, saturate=True)
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
    In a plain run (``npu-emulate --plain``) nothing is installed.
    """
    if _patched or plain_run():   # a plain run (npu-emulate --plain) applies no mode
        return
    from tensorflow.python.client import (  # pylint: disable=import-outside-toplevel
        session as session_lib)
    original = session_lib.BaseSession.__init__
    original_extend = session_lib.BaseSession._extend_graph  # pylint: disable=protected-access

    def __init__(self, target="", graph=None, config=None):
        try:
            mode = precision_mode_of(config) or _default_mode[0]
            mixlist = None
            if mode is not None:
                mixlist = precision_lists.modify_mixlist_of(config)   # else the process-wide one
                apply_precision_mode(graph if graph is not None
                                     else tf.compat.v1.get_default_graph(), mode, mixlist)
        except Exception:
            self._session = None   # BaseSession.__del__ reads it  pylint: disable=protected-access
            raise
        self._npu_precision = [mode, None, mixlist]  # pylint: disable=protected-access
        original(self, target, graph, config)

    def _extend_graph(self):
        state = getattr(self, "_npu_precision", None)
        if state is not None and state[0] is not None:
            version = self._graph.version  # pylint: disable=protected-access
            if version != state[1]:
                apply_precision_mode(self._graph, state[0], state[2])  # pylint: disable=protected-access
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


__all__ = [
    "CUBE_OPS", "FORCE_FP16_OPS", "PRECISION_MODES", "check_precision_mode", "precision_mode_of",
    "apply_precision_mode", "set_default_precision_mode", "install_session_hook",
    "uninstall_session_hook", "install_op_precision", "uninstall_op_precision",
    "op_precision_mode", "op_precision", "rewrite_counters",
]
