"""Overflow detection backends: "did anything overflow since the last clear?"

Three backends answer that question:

``npu``
    The real Ascend float-status ops from ``npu_bridge`` (only inside the CANN toolkit).
``emulation``
    The CPU stand-in of the device register (:mod:`npu_loss_scale.device.register`): overflow recorded
    by :func:`~npu_loss_scale.device.register.saturate` inside the model, and IEEE infs and NaNs (of
    code outside ``saturate``) found in the scaled gradients.
``inf_nan``
    Plain IEEE check: some gradient holds an inf or a NaN (what TensorFlow's own optimizer does).

The backend is chosen by the optimizer's ``backend=`` argument, else the ``NPU_LOSS_SCALE_BACKEND``
environment variable, else automatically: ``npu`` when the real ``npu_bridge`` imports,
``emulation`` otherwise (the CPU shim of ``python -m npu_loss_scale.emulate`` does not count as
real). :func:`get_backend_name` says which one applies.

Each backend takes part in a training step at these points::

    observe_scaled_gradients(grads) -> op run on the still-scaled gradients (the device sees these),
                                       or None
    reader()                        -> a handle for one reader (one optimizer in one graph)
    read_status(grads, reader)      -> float32 vector, all zeros <=> no overflow since this
                                       reader's previous read; read only after every gradient
    end_step(status, reader)        -> op run after the read: clears what was read
    clear()                         -> op that clears the register (evaluation and prediction
                                       paths run it: see :func:`npu_loss_scale.clear_overflow_status`)

The register is sticky from one read to the next, across ``session.run`` calls, as on the
device: nothing clears it when gradients start being computed, so the overflow of an earlier
micro-batch of an accumulation is still there when the step reads it. Overflow of an evaluation
run is still there too: evaluation paths clear it themselves (:class:`npu_loss_scale.LossScaleHook`
in evaluation mode, :func:`npu_loss_scale.clear_overflow_status`).

Both overflow modes take the same path: in INF/NaN mode ``read_status`` answers from an IEEE
inf/NaN test of the gradients, as the device's register is not meant to be read in that mode
(legitimate infs, such as -inf attention masks, would set it). The mode is read when the train op
is built.
"""
import abc
import importlib
import os
import sys
import threading

import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal.gradients import floating_values
from npu_loss_scale._internal.probe import (  # noqa: F401  (public here too)
    BACKEND_NAMES, ENV_VAR, SHIM_MARKER, active_device_plugin, get_backend_name, is_shim,
    npu_bridge_available, npu_bridge_gen_ops, npu_is_inf_nan_enabled, npu_plugin_module)
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import localisation

_as_is = _graphs.as_is


class Unscaled:  # pylint: disable=too-few-public-methods
    """What :func:`nonfinite_flag` leaves in ``readers`` for a tensor it also unscaled."""

    def __init__(self, values):
        self.values = values



def nonfinite_flag(grads, readers=None, reciprocal=None):
    """float32 scalar: 1 when some gradient holds an inf or a NaN, else 0 (None entries ignored).

    One read pass over the gradients and no temporary: each tensor is summed (in float32 or
    float64) and the per-tensor sums are reduced once. An inf or NaN anywhere makes the sum
    non-finite. A sum of finite values overflows only for values around 1e31 and more; such a
    step is skipped too (the loss scale then comes down), which never lets an overflow through.

    ``readers``, when a dict, receives ``{id(values tensor): its sum}``: an op that runs after
    this pass is done with that tensor (the unscaling waits for it, so it is the tensor's last
    reader and TensorFlow can write the unscaled values into the same buffer).

    With ``readers`` and ``reciprocal`` (an :class:`npu_loss_scale.scaling.unscale.Reciprocal`) given
    and the fused kernel available (:mod:`npu_loss_scale._internal.kernels`), each tensor is checked
    *and* unscaled in that one pass: ``readers`` then holds an :class:`Unscaled` with the unscaled values, and
    the flag counts exactly the infs and NaNs (no finite sum can overflow).
    """
    fused = None
    if readers is not None and reciprocal is not None:
        from npu_loss_scale._internal import kernels as _kernels  # pylint: disable=import-outside-toplevel
        fused = _kernels.load_unscale_check()
    sums = []
    for values in floating_values(grads):
        key = id(values)
        if fused is not None and values.dtype.name in _kernels.FUSED_DTYPES:
            unscaled, check = fused.nls_unscale_and_check(values, reciprocal.factors)
            sums.append(check)
            readers[key] = Unscaled(unscaled)
            continue
        if values.dtype not in (tf.float32, tf.float64):
            values = tf.cast(values, tf.float32)
        sums.append(tf.cast(tf.reduce_sum(values), tf.float32))
        if readers is not None:
            readers[key] = sums[-1]
    if not sums:
        return tf.zeros([], tf.float32)
    total = sums[0] if len(sums) == 1 else tf.add_n(sums)
    return tf.cast(tf.logical_not(tf.math.is_finite(total)), tf.float32)


def _status(flags):
    """float32[1]: the sum of the flags (0 = nothing overflowed). Always one entry, so replicas
    that checked their gradients in different ways still have statuses of one shape."""
    flags = list(flags)
    if not flags:
        return tf.zeros([1], tf.float32)
    total = flags[0] if len(flags) == 1 else tf.add_n(flags)
    return tf.reshape(total, [1])


def _grad_tensors(grads):
    """The tensors a status read must wait for, usable as control inputs in the current graph.

    A gradient built outside the graph being built (``apply_gradients`` inside a ``tf.cond``
    branch) goes through an identity made here: a control dependency on an outer tensor is not
    kept once TensorFlow lowers the cond to Switch/Merge, and the read would run as soon as the
    predicate is known, before the gradients (and the saturation events they wait for).
    """
    out = []
    for g in grads:
        if g is None:
            continue
        out.extend([g.values, g.indices] if isinstance(g, tf.IndexedSlices) else [g])
    if tf.executing_eagerly():
        return []
    graph = tf.compat.v1.get_default_graph()
    return [t if getattr(t, "graph", graph) is graph else tf.identity(t) for t in out]


class OverflowDetector(abc.ABC):
    """Interface of a detection backend; see the module docstring for the protocol."""

    name = None

    def observe_scaled_gradients(self, grads, readers=None,  # pylint: disable=unused-argument
                                 reciprocal=None):
        """(tensor the read must wait for or None, float32 flag or None).

        The flag (1 = overflow) stands for these gradients at the read; None means the
        register covers them. ``readers`` (a dict or None) receives, per gradient value tensor
        read here, the op reading it or, given ``reciprocal``, possibly its unscaled values
        (see :func:`nonfinite_flag`).
        """
        return None, None

    def reader(self):
        """A reader handle for :meth:`read_status` and :meth:`end_step` (built once per graph)."""
        return None

    @abc.abstractmethod
    def read_status(self, grads, reader=None, known_flags=(), wait_for=()):
        """float32 vector whose entries are all zero exactly when nothing overflowed.

        ``grads``: gradients to check that no observation covers; ``known_flags``: flags of
        gradients observed in scaled form (no second pass over them); ``wait_for``: tensors the
        read must run after (every gradient of the step).
        """

    def end_step(self, status, reader=None):  # pylint: disable=unused-argument
        return None

    def clear(self):
        """Op that clears the overflow status (None when the backend keeps none)."""
        return None

    def __repr__(self):
        return "<%s backend>" % self.name


def _ieee_status(grads, known_flags):
    flags = list(known_flags)
    if grads or not flags:
        flags.append(nonfinite_flag(grads))
    status = _status(flags)
    # With overflow localisation on, this read closes the step's record, as a register read
    # does in saturation mode (the sites noted in INF/NaN mode, or by saturation when the
    # inf_nan backend runs on an emulated device in saturation mode).
    readout = None
    if localisation.enabled():
        with tf.control_dependencies([status]):   # after the gradients and their sites
            readout = localisation.step_boundary(status)
    if readout is not None:
        with tf.control_dependencies([readout]):
            status = tf.identity(status)
    return status


class InfNanDetector(OverflowDetector):
    """IEEE detection: a step overflowed when some gradient is inf or NaN."""

    name = "inf_nan"

    def observe_scaled_gradients(self, grads, readers=None, reciprocal=None):
        return None, nonfinite_flag(grads, readers, reciprocal)

    def read_status(self, grads, reader=None, known_flags=(), wait_for=()):
        return _ieee_status(grads, known_flags)


class _RegisterDetector(OverflowDetector):
    """Detection through a float-status register (emulated or real), read after all gradients."""

    def _get(self, reader):
        raise NotImplementedError

    def _clear_read(self, reader):
        raise NotImplementedError

    def _inf_nan_mode(self):
        raise NotImplementedError

    def _check_finite_too(self):
        """In saturation mode, also count IEEE infs/NaNs in gradients no observation covers."""
        return False

    def observe_scaled_gradients(self, grads, readers=None, reciprocal=None):
        if self._inf_nan_mode():
            return None, nonfinite_flag(grads, readers, reciprocal)
        return None, None

    def read_status(self, grads, reader=None, known_flags=(), wait_for=()):
        if self._inf_nan_mode():
            return _ieee_status(grads, known_flags)
        with tf.control_dependencies(_grad_tensors(list(wait_for) or grads)):
            words = tf.cast(self._get(reader), tf.float32)
        extra = list(known_flags)
        if self._check_finite_too() and grads:
            extra.append(nonfinite_flag(grads))
        if self._check_finite_too() or extra:
            return tf.concat([words, _status(extra)], axis=0)
        return words

    def end_step(self, status, reader=None):
        with tf.control_dependencies([status]):
            return self._clear_read(reader)


class EmulationDetector(_RegisterDetector):
    """The CPU emulation of the Ascend register (see :mod:`npu_loss_scale.device.register`).

    Each optimizer reads and clears a slot of the register of its own (its ``reader``); every
    overflow is recorded in all slots, so optimizers whose train ops run in one ``session.run``
    each see every overflow since their own previous read. Because code outside
    :func:`~npu_loss_scale.device.register.saturate` still produces IEEE infs and NaNs on a CPU, the
    scaled gradients are checked for them in one read pass when ``compute_gradients`` builds
    them (the result goes into the register), and gradients no such check covers are checked
    at the read.
    """

    name = "emulation"

    def reader(self):
        return emulation.allocate_reader_slot()

    def _get(self, reader):
        return emulation.read_slot(0 if reader is None else reader)

    def _clear_read(self, reader):
        if reader is None:
            return emulation.npu_clear_float_status_v2()
        return emulation.clear_slot(reader)

    def clear(self):
        return emulation.npu_clear_float_status_v2()

    def _inf_nan_mode(self):
        return emulation.is_inf_nan_enabled()

    def _check_finite_too(self):
        return True

    def observe_scaled_gradients(self, grads, readers=None, reciprocal=None):
        if self._inf_nan_mode():
            return None, nonfinite_flag(grads, readers, reciprocal)
        # Saturation events inside the model were recorded by saturate(); IEEE infs and NaNs of
        # code outside it are recorded here, with one read pass over the scaled gradients.
        flag = nonfinite_flag(grads, readers, reciprocal)
        with tf.control_dependencies([emulation.record(flag > 0)]):
            return tf.identity(flag), None


class NpuDetector(_RegisterDetector):
    """The real device register, through ``npu_bridge`` (Ascend CANN toolkit).

    Status ops come from ``npu_bridge.helper.helper.get_gen_ops()`` (``npu_get_float_status_v2``,
    ``npu_clear_float_status_v2``), the overflow mode from
    ``npu_bridge.estimator.npu.npu_plugin.is_inf_nan_enabled()``. The device has one register:
    two optimizers whose train ops run in the same ``session.run`` share it (the first read
    clears what the second would have seen); run them in separate runs on the device.
    """

    name = "npu"

    def __init__(self):
        self._gen_ops = npu_bridge_gen_ops()

    def _get(self, reader):
        return self._gen_ops.npu_get_float_status_v2()

    def _clear_read(self, reader):
        return self._gen_ops.npu_clear_float_status_v2()

    def clear(self):
        return self._gen_ops.npu_clear_float_status_v2()

    def _inf_nan_mode(self):
        return npu_is_inf_nan_enabled()


# -- choice ----------------------------------------------------------------------------------------
_FACTORIES = {"npu": NpuDetector, "emulation": EmulationDetector, "inf_nan": InfNanDetector}


@_as_is
def make_detector(backend=None):
    """Builds the detection backend named by :func:`get_backend_name`."""
    if isinstance(backend, OverflowDetector):
        return backend
    return _FACTORIES[get_backend_name(backend)]()


def clear_overflow_status(backend=None, after=None, name="clear_overflow_status"):
    """Clears the overflow status register; evaluation and prediction paths run it.

    The register is sticky from one read of a training step to the next, as on the device, so
    an overflow of an evaluation or prediction run would make the next training step skip. Run
    this after such runs (or fetch it with them: ``after=`` the evaluation's tensors orders the
    clear after them). In graph mode it returns the op (a no-op for ``inf_nan``, which keeps no
    register); in eager mode it clears at once and returns None.

    Example::

        acc = evaluate_tower(...)                       # may overflow in saturation mode
        clear = npu_loss_scale.clear_overflow_status(after=[acc])
        value, _ = sess.run([acc, clear])

    Args:
      backend: ``npu``, ``emulation`` or ``inf_nan``; default :func:`get_backend_name`.
      after: tensors or ops the clear must wait for.
      name: the op's name.
    """
    detector = make_detector(backend)
    deps = [a for a in tf.nest.flatten(after)] if after is not None else []
    with tf.control_dependencies(deps):
        op = detector.clear()
        if op is None:
            op = tf.no_op()
        if tf.executing_eagerly():
            return None
        return tf.group(op, name=name)


__all__ = [
    "BACKEND_NAMES", "ENV_VAR", "get_backend_name", "make_detector", "clear_overflow_status",
    "OverflowDetector", "InfNanDetector", "EmulationDetector", "NpuDetector", "Unscaled",
    "nonfinite_flag", "npu_bridge_available", "is_shim", "SHIM_MARKER",
]
