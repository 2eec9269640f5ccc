"""Overflow detection backends: "did anything overflow since the last clear?"

Three backends answer that question:

``npu``
    The real Ascend float-status ops from ``npu_bridge`` (only inside the CANN toolkit).
``emulation``
    The CPU stand-in of the device register (:mod:`npu_loss_scale.emulation`): overflow recorded
    by :func:`~npu_loss_scale.emulation.saturate` inside the model and by scaled gradients that
    are non-finite or hit ±MAX of their dtype.
``inf_nan``
    Plain IEEE check: some gradient holds an inf or a NaN (what TensorFlow's own optimizer does).

The backend is chosen by the optimizer's ``backend=`` argument, else the ``NPU_LOSS_SCALE_BACKEND``
environment variable, else automatically: ``npu`` when ``npu_bridge`` imports, ``emulation``
otherwise. :func:`get_backend_name` says which one applies.

Each backend takes part in a training step at three points::

    begin_step(loss)                -> op run before the gradients are computed (clears the register)
    observe_scaled_gradients(grads) -> op run on the still-scaled gradients (the device sees these)
    read_status(grads)              -> float32 vector, all zeros <=> no overflow; read only after
                                       every gradient exists
    end_step(status)                -> op run after the read (clears the register again)
"""
import abc
import importlib
import os

import tensorflow as tf

from . import _checks, emulation

ENV_VAR = "NPU_LOSS_SCALE_BACKEND"
BACKEND_NAMES = ("npu", "emulation", "inf_nan")


def _nonfinite_count(grads):
    """float32 scalar: how many of ``grads`` hold an inf or a NaN (None entries ignored)."""
    checks = []
    for g in grads:
        if g is None:
            continue
        values = g.values if isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g)
        if not values.dtype.is_floating:
            continue
        checks.append(tf.logical_not(tf.reduce_all(tf.math.is_finite(values))))
    if not checks:
        return tf.zeros([], tf.float32)
    return tf.reduce_sum(tf.cast(tf.stack(checks), tf.float32))


def _grad_tensors(grads):
    out = []
    for g in grads:
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            out.extend([g.values, g.indices])
        else:
            out.append(g)
    return out


class OverflowDetector(abc.ABC):
    """Interface of a detection backend; see the module docstring for the protocol."""

    name = None

    def begin_step(self, loss):  # pylint: disable=unused-argument
        return None

    def observe_scaled_gradients(self, grads):  # pylint: disable=unused-argument
        return None

    @abc.abstractmethod
    def read_status(self, grads):
        """float32 vector whose entries are all zero exactly when nothing overflowed."""

    def end_step(self, status):  # pylint: disable=unused-argument
        return None

    def __repr__(self):
        return "<%s backend>" % self.name


class InfNanDetector(OverflowDetector):
    """IEEE detection: a step overflowed when some gradient is inf or NaN."""

    name = "inf_nan"

    def read_status(self, grads):
        return tf.reshape(_nonfinite_count(grads), [1])


class _RegisterDetector(OverflowDetector):
    """Detection through a float-status register (emulated or real), read after all gradients."""

    def _ops(self):
        raise NotImplementedError

    def _check_finite_too(self):
        raise NotImplementedError

    def read_status(self, grads):
        get_status, _ = self._ops()
        with tf.control_dependencies(_grad_tensors(grads)):
            words = tf.cast(get_status(), tf.float32)
        if self._check_finite_too():
            return tf.concat([words, tf.reshape(_nonfinite_count(grads), [1])], axis=0)
        return words

    def end_step(self, status):
        _, clear_status = self._ops()
        with tf.control_dependencies([status]):
            return clear_status()


class EmulationDetector(_RegisterDetector):
    """The CPU emulation of the Ascend register (see :mod:`npu_loss_scale.emulation`)."""

    name = "emulation"

    def _ops(self):
        return emulation.npu_get_float_status_v2, emulation.npu_clear_float_status_v2

    def _check_finite_too(self):
        # Code outside `saturate` still produces IEEE infs/NaNs on a CPU: always count them.
        return True

    def begin_step(self, loss):
        tensors = [loss] if isinstance(loss, tf.Tensor) else []
        return emulation.clear_keeping(emulation.forward_events_feeding(tensors))

    def observe_scaled_gradients(self, grads):
        return emulation.record_scaled_gradients(grads)


class NpuDetector(_RegisterDetector):
    """The real device register, through ``npu_bridge`` (Ascend CANN toolkit)."""

    name = "npu"

    def __init__(self):
        self._gen_ops = _npu_bridge_gen_ops()

    def _ops(self):
        return self._gen_ops.npu_get_float_status_v2, self._gen_ops.npu_clear_float_status_v2

    def _check_finite_too(self):
        return npu_is_inf_nan_enabled()

    def begin_step(self, loss):  # pylint: disable=unused-argument
        return self._gen_ops.npu_clear_float_status_v2()


# -- npu_bridge access (lazy) --------------------------------------------------------------------
def _import(name):
    return importlib.import_module(name)


def npu_bridge_available():
    """True when the real ``npu_bridge`` (or a stand-in on sys.path) imports."""
    try:
        _import("npu_bridge.helper.helper")
    except ImportError:
        return False
    return True


def _npu_bridge_gen_ops():
    try:
        helper = _import("npu_bridge.helper.helper")
    except ImportError as err:
        raise ImportError("backend 'npu' needs npu_bridge (from Huawei's CANN toolkit), which "
                          "did not import: %s. Use backend='emulation' off the device." % err)
    return helper.get_gen_ops()


def npu_is_inf_nan_enabled():
    plugin = _import("npu_bridge.estimator.npu.npu_plugin")
    return bool(plugin.is_inf_nan_enabled())


# -- choice ----------------------------------------------------------------------------------------
_FACTORIES = {"npu": NpuDetector, "emulation": EmulationDetector, "inf_nan": InfNanDetector}


def get_backend_name(backend=None):
    """Which detection backend applies: the argument, else $NPU_LOSS_SCALE_BACKEND, else auto.

    Automatic choice: ``npu`` when ``npu_bridge`` imports, ``emulation`` otherwise.
    """
    if backend is not None:
        return _checks.one_of("backend", backend, BACKEND_NAMES)
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        if env not in BACKEND_NAMES:
            raise ValueError("environment variable %s must be one of %s; got %r"
                             % (ENV_VAR, ", ".join(BACKEND_NAMES), env))
        return env
    return "npu" if npu_bridge_available() else "emulation"


def make_detector(backend=None):
    """Builds the detection backend named by :func:`get_backend_name`."""
    if isinstance(backend, OverflowDetector):
        return backend
    return _FACTORIES[get_backend_name(backend)]()
