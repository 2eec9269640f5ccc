"""Saturation-mode arithmetic in real models: a Keras layer, a function wrapper, every fp16 op.

An Atlas training device in saturation mode saturates *inside every op*: an overflowing result
becomes ±MAX of its dtype (±65504 for float16), NaN becomes 0, and the float-status register
remembers. A CPU does IEEE arithmetic instead. :func:`npu_loss_scale.device.register.saturate` turns
IEEE results into the device's, for one tensor and the gradient flowing back through it. This
module applies it where it matters, from the most local to the most faithful:

:class:`Saturate`
    A Keras layer (Keras 2 through ``tf.keras`` on TF 2.15, Keras 3 on TF 2.16+) that saturates
    every floating tensor it is given. Put it after the layers that can overflow.

:func:`saturating`
    A decorator for model functions: the floating tensors the function returns, and the
    gradients that flow back into them, are saturated. With ``every_op=True`` every float16 op
    the function builds is saturated as well (see below) — the natural choice for an Estimator
    ``model_fn`` or a TF1 model-building function.

:func:`saturate_every_op`
    A context manager: every op built inside it whose output is float16 (or another dtype you
    name) gets that output saturated, and each saturation records overflow in the emulated
    register — what the device does. Build the gradients inside it too and the backward ops are
    saturated the same way (the gradient flowing into each saturated tensor is saturated in any
    case). ``python -m npu_loss_scale.emulate --saturate-every-op script.py`` wraps a whole
    unmodified script in it.

All three follow the overflow mode: in INF/NaN mode (``set_device_sat_mode(1)``) and on the real
device (backend ``npu``) they change nothing.

Example::

    import tensorflow as tf
    from npu_loss_scale import saturation

    @saturation.saturating(every_op=True)
    def model(x16, w):
        h = tf.matmul(x16, tf.cast(w, tf.float16))     # saturated: a float16 op
        return tf.reduce_sum(tf.cast(h, tf.float32))   # the float32 loss is saturated too

Limits (see docs/fidelity.md): op-level saturation happens where TensorFlow creates an op in a
graph — a ``tf.compat.v1`` graph or a ``tf.function`` being traced — in the thread that entered
the context (TensorFlow's op callbacks are per thread); ops run eagerly one by one are not
changed, so wrap eager code in ``tf.function``. Ops that only move or reinterpret data (reshape,
transpose, gather, identity, ...) and control-flow ops are left alone: they cannot overflow.
Keras 3 ``model.fit`` must run with ``jit_compile=False``: the emulated register is a hash table,
which XLA cannot compile.
"""
import contextlib
import functools
import threading

import tensorflow as tf

from npu_loss_scale.device import ieee_sites
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import saturate as saturate_lib

DEFAULT_DTYPES = ("float16",)

# Ops whose outputs are data moved, reinterpreted or fed, not computed: they cannot overflow.
# Control-flow ops are skipped because replacing their outputs breaks graph construction.
SKIPPED_OP_TYPES = frozenset([
    "Const", "Placeholder", "PlaceholderWithDefault", "VarHandleOp", "ReadVariableOp",
    "VariableV2", "Variable", "Identity", "IdentityN", "Snapshot", "StopGradient",
    "PreventGradient", "Reshape", "Squeeze", "ExpandDims", "Transpose", "ConjugateTranspose",
    "ConcatV2", "Concat", "Pack", "Unpack", "Split", "SplitV", "Slice", "StridedSlice", "Tile",
    "BroadcastTo", "GatherV2", "Gather", "GatherNd", "ResourceGather", "ZerosLike", "OnesLike",
    "Fill", "Bitcast",
    "If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase", "Enter",
    "RefEnter", "Exit", "RefExit", "Merge", "RefMerge", "Switch", "RefSwitch", "NextIteration",
    "RefNextIteration", "LoopCond", "_SwitchN",
])


def _active():
    """True when saturation applies now: saturation mode, and not on the real device."""
    return emulation._device_plugin() is None and not emulation.is_inf_nan_enabled()  # pylint: disable=protected-access


def _saturate_structure(value):
    """Saturates the floating tensors in a list/tuple/dict structure; anything else is kept.

    Only plain ``list``, ``tuple`` and ``dict`` are entered: named tuples such as an Estimator's
    ``EstimatorSpec`` pass through untouched.
    """
    if isinstance(value, tf.Tensor):
        return emulation.saturate(value) if value.dtype.is_floating else value
    if type(value) in (list, tuple):  # pylint: disable=unidiomatic-typecheck
        return type(value)(_saturate_structure(v) for v in value)
    if type(value) is dict:  # pylint: disable=unidiomatic-typecheck
        return {k: _saturate_structure(v) for k, v in value.items()}
    return value


# -- every op ------------------------------------------------------------------------------------
def _op_callbacks():
    try:
        from npu_loss_scale._internal.compat import (  # pylint: disable=import-outside-toplevel
            op_callbacks)
    except ImportError as err:  # pragma: no cover - present in TF 1.15 and every TF 2.x so far
        raise RuntimeError("saturate_every_op needs TensorFlow's op callbacks "
                           "(tensorflow.python.framework.op_callbacks), which did not import: %s. "
                           "Apply saturate() or the Saturate layer by hand instead." % err)
    return op_callbacks


def _dtype_set(dtypes):
    if isinstance(dtypes, (str, tf.DType)):
        dtypes = (dtypes,)
    try:
        out = frozenset(tf.as_dtype(d) for d in dtypes)
    except TypeError as err:
        raise TypeError("dtypes must be floating dtypes or their names, such as ('float16',); "
                        "got %r (%s)" % (dtypes, err))
    bad = sorted(d.name for d in out if not d.is_floating)
    if not out or bad:
        raise ValueError("dtypes must name at least one floating dtype (float16, bfloat16, "
                         "float32, float64); got %r" % (dtypes,))
    return out


class _EveryOpCallback:
    """Op callback that saturates the outputs of newly built ops of the chosen dtypes."""

    def __init__(self, dtypes):
        self.dtypes = dtypes
        self.saturated = 0  # outputs saturated so far (for tests and curiosity)

    def __call__(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):  # pylint: disable=unused-argument
        if graph is None or op_type in SKIPPED_OP_TYPES:
            return None  # eager execution (values cannot be replaced there) or a data move
        if not any(t.dtype in self.dtypes for t in outputs):
            return None
        if saturate_lib.building_internals():
            return None   # the ops of a gradient's own saturation
        if _active():
            apply = saturate_lib._saturate  # pylint: disable=protected-access
        elif emulation._localising_ieee():  # pylint: disable=protected-access
            apply = ieee_sites.note_ieee  # INF/NaN mode: values kept, sites noted
        else:
            return None   # not saturating now
        replaced = []
        for t in outputs:
            if t.dtype in self.dtypes:
                replaced.append(apply(t, site=t.op.name))
                self.saturated += 1
            else:
                replaced.append(t)
        return replaced


_local = saturate_lib.every_op_state   # the depth of saturate_every_op in each thread


@contextlib.contextmanager
def saturate_every_op(dtypes=DEFAULT_DTYPES):
    """Saturates the output of every op of ``dtypes`` built inside the context, as the device does.

    Applies while graphs are built (``tf.compat.v1`` graphs, ``tf.function`` tracing) in this
    thread. Each float16 result of an arithmetic op is followed by
    :func:`~npu_loss_scale.device.register.saturate`: overflow becomes ±65504, NaN becomes 0, the
    emulated register records it, and the gradient flowing back is saturated too. Build the
    gradients inside the context as well to saturate the backward ops' own results. Nesting is
    allowed. Yields the callback object, whose ``saturated`` attribute counts saturated outputs.

    Example::

        with tf.Graph().as_default():
            with saturate_every_op():
                x = tf.constant([300.0], tf.float16)
                y = x * x                      # 90000 -> 65504, register set
                g = tf.gradients(y, x)

    Args:
      dtypes: floating dtypes (or names) whose op outputs are saturated; default float16 only.
    """
    callback = _EveryOpCallback(_dtype_set(dtypes))
    op_callbacks = _op_callbacks()
    op_callbacks.add_op_callback(callback)
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        yield callback
    finally:
        _local.depth = depth
        op_callbacks.remove_op_callback(callback)


def every_op_active():
    """True inside :func:`saturate_every_op` in this thread."""
    return getattr(_local, "depth", 0) > 0


# -- function wrapper ----------------------------------------------------------------------------
def saturating(fn=None, *, every_op=False, dtypes=DEFAULT_DTYPES, inputs=False, outputs=True):
    """Decorator: ``fn`` computes as the device does in saturation mode.

    * ``outputs=True`` (default): every floating tensor ``fn`` returns (in plain lists, tuples and
      dicts; named tuples such as ``EstimatorSpec`` are left alone) is saturated, and so is the
      gradient flowing back into it.
    * ``every_op=True``: ``fn`` runs inside :func:`saturate_every_op` (``dtypes``), so every
      float16 op it builds — the gradients too, if it builds them — is saturated.
    * ``inputs=True``: floating tensor arguments are saturated before ``fn`` sees them.

    Usable bare (``@saturating``) or with options (``@saturating(every_op=True)``).

    Example::

        @saturating(every_op=True, outputs=False)
        def model_fn(features, labels, mode, params):    # an Estimator model_fn
            ...
    """
    dtype_set = _dtype_set(dtypes)  # validate now, not at the first call

    def decorate(func):
        if not callable(func):
            raise TypeError("saturating() decorates a callable; got %r" % (func,))

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if inputs:
                args = tuple(_saturate_structure(a) for a in args)
                kwargs = {k: _saturate_structure(v) for k, v in kwargs.items()}
            if every_op:
                with saturate_every_op(tuple(dtype_set)):
                    result = func(*args, **kwargs)
            else:
                result = func(*args, **kwargs)
            return _saturate_structure(result) if outputs else result

        return wrapper

    if fn is None:
        return decorate
    return decorate(fn)


# -- Keras layer (built on first use: importing Keras is slow) ------------------------------------
_layer_class = []


def _build_layer_class():
    base = tf.keras.layers.Layer

    class Saturate(base):  # pylint: disable=too-few-public-methods
        """Keras layer: saturates every floating tensor passing through, as the device does.

        Forward: overflowed values (inf) become ±MAX of their dtype, NaN becomes 0; backward: the
        gradient is saturated the same way; both set the emulated float-status register. Inputs
        keep their dtype (no autocasting under a mixed-precision policy). In INF/NaN mode, and on
        the real device, it is the identity.

        Example::

            x = tf.keras.Input((16,))
            h = tf.keras.layers.Dense(16, dtype="mixed_float16")(x)
            h = Saturate()(h)
        """

        def __init__(self, **kwargs):
            kwargs.setdefault("trainable", False)
            kwargs.setdefault("autocast", False)
            super().__init__(**kwargs)
            self.supports_masking = True
            # Keras 3 converts floating inputs to the compute dtype unless told not to.
            self._convert_input_args = False

        def call(self, inputs):  # pylint: disable=arguments-differ
            return _saturate_structure(inputs)

        def compute_output_shape(self, input_shape):
            return input_shape

    try:
        register = tf.keras.utils.register_keras_serializable(package="npu_loss_scale")
        Saturate = register(Saturate)
    except (AttributeError, ValueError):  # pragma: no cover - registration is a convenience
        pass
    return Saturate


def __getattr__(name):
    if name == "Saturate":
        if not _layer_class:
            _layer_class.append(_build_layer_class())
        return _layer_class[0]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["Saturate", "saturating", "saturate_every_op", "every_op_active", "DEFAULT_DTYPES",
           "SKIPPED_OP_TYPES"]
