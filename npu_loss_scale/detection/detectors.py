"""The detection backends, one class each, behind one protocol.

Each backend takes part in a training step at these points::

    observe_scaled_gradients(grads) -> op run on the still-scaled gradients (the device sees these),
                                       or None
    reader()                        -> a handle for one reader (one optimizer in one graph)
    read_status(grads, reader)      -> float32 vector, all zeros <=> no overflow since this
                                       reader's previous read; read only after every gradient
    end_step(status, reader)        -> op run after the read: clears what was read
    clear()                         -> op that clears the register (evaluation and prediction
                                       paths run it: see :func:`npu_loss_scale.clear_overflow_status`)
    uses_register()                 -> whether a register answers now (not in INF/NaN mode)
    value_test(count_saturated)     -> which gradient values count as overflowed now: a test of
                                       :mod:`npu_loss_scale.detection.flags`, or None

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

import tensorflow as tf

from npu_loss_scale._internal.probe import npu_bridge_gen_ops, npu_is_inf_nan_enabled
from npu_loss_scale.detection import flags as _flags
from npu_loss_scale.detection.flags import nonfinite_flag
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import localisation


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

    def uses_register(self):
        """True when a float-status register answers (read when ops are built, as the mode is)."""
        return False

    def value_test(self, count_saturated=False):  # pylint: disable=unused-argument
        """Which values of a gradient count as overflowed for this backend now: a test of
        :mod:`npu_loss_scale.detection.flags` (``nonfinite`` or ``at_max``), or None when the
        register says it all. ``count_saturated``: the values are still scaled and seen by a
        front end that has nothing but them where the register does not look (GradScaler,
        Keras), so ±MAX counts where saturation can leave it.
        """
        return _flags.nonfinite

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
    status = _flags.status_of(flags)
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

    def _saturation_value_test(self, count_saturated):
        """:meth:`value_test` in saturation mode (the register covers the model's ops)."""
        return None

    def uses_register(self):
        return not self._inf_nan_mode()

    def value_test(self, count_saturated=False):
        if self._inf_nan_mode():
            return _flags.nonfinite
        return self._saturation_value_test(count_saturated)

    def observe_scaled_gradients(self, grads, readers=None, reciprocal=None):
        if self._inf_nan_mode():
            return None, nonfinite_flag(grads, readers, reciprocal)
        return None, None

    def read_status(self, grads, reader=None, known_flags=(), wait_for=()):
        if self._inf_nan_mode():
            return _ieee_status(grads, known_flags)
        with tf.control_dependencies(_grad_tensors(list(wait_for) or grads)):
            words = tf.cast(self._get(reader), tf.float32)
        # In saturation mode a backend whose values count too (emulation: IEEE infs of code
        # outside saturate) checks the gradients no observation covered, in one pass.
        values_count = self._saturation_value_test(False) is not None
        extra = list(known_flags)
        if values_count and grads:
            extra.append(nonfinite_flag(grads))
        if values_count or extra:
            return tf.concat([words, _flags.status_of(extra)], axis=0)
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
        if reader is None:   # the device's view, as scripts read it
            return emulation.npu_get_float_status_v2()
        return emulation.read_slot(reader)

    def _clear_read(self, reader):
        if reader is None:
            return emulation.npu_clear_float_status_v2()
        return emulation.clear_slot(reader)

    def clear(self):
        return emulation.npu_clear_float_status_v2()

    def _inf_nan_mode(self):
        return emulation.is_inf_nan_enabled()

    def _saturation_value_test(self, count_saturated):
        # IEEE infs and NaNs of code outside saturate(); ±MAX where saturation left it, for a
        # front end that sees the scaled values only.
        return _flags.at_max if count_saturated else _flags.nonfinite

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


__all__ = ["OverflowDetector", "InfNanDetector", "EmulationDetector", "NpuDetector"]
