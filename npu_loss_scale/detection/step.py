"""One training step's overflow detection, as the TF2 front ends (GradScaler, the optimizer thread,
Keras's NpuLossScaleOptimizer) take part in it.

"Did anything overflow this step?" is answered by the detection backend the front end names
(:func:`npu_loss_scale.get_backend_name`), through the backend's own protocol
(:mod:`npu_loss_scale.detection.backends`):

* a backend with a float-status register (``npu``, ``emulation``) in saturation mode: the
  register, read once the gradients exist and cleared after the read (the device's view: every
  reader slot is cleared, as ``npu_clear_float_status_v2`` does);
* the values of the gradients, tested as the backend says
  (:meth:`~npu_loss_scale.detection.backends.OverflowDetector.value_test`): on ``emulation`` in
  saturation mode a still-scaled value that is inf, NaN or ±MAX counts (code outside
  :func:`~npu_loss_scale.device.register.saturate` makes IEEE infs on a CPU); on ``npu`` in
  saturation mode the register says it all; with ``inf_nan``, or in INF/NaN mode, ``is_finite``.

The register is sticky from one read to the next, so it also holds overflows from the forward
pass (and from earlier micro-batches) of the step.

A front end holds one :class:`OverflowCheck` (its backend and agreement) and makes a
:class:`StepCheck` with :meth:`OverflowCheck.start` when a step's gradients are built; that one
object is then passed to the read, the agreement and the end.
"""
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale import agreement as agreement_lib
from npu_loss_scale.detection import backends
from npu_loss_scale.detection import flags
from npu_loss_scale.scaling.unscale import unscale_gradient


class OverflowCheck:
    """How one front end detects overflow; :meth:`start` makes one step's :class:`StepCheck`.

    Args:
      backend: ``"npu"``, ``"emulation"``, ``"inf_nan"`` or None (see ``get_backend_name``).
      is_distributed: sum the found-overflow flag over ranks (one collective per call of
        :meth:`StepCheck.agree`).
      agreement: how ranks agree (see :mod:`npu_loss_scale.agreement`); None = discovered.
    """

    def __init__(self, backend=None, is_distributed=False, agreement=None):
        self.backend_name = backends.get_backend_name(backend)
        self.is_distributed = bool(is_distributed)
        if agreement is not None and not isinstance(agreement, agreement_lib.Agreement):
            _checks.one_of("agreement", agreement, agreement_lib.AGREEMENT_NAMES)
        self.agreement = agreement
        self._detector = None

    @property
    def detector(self):
        """The backend (made at the first step: ``npu`` needs npu_bridge only once it reads)."""
        if self._detector is None:
            self._detector = backends.make_detector(self.backend_name)
        return self._detector

    def start(self):
        """The :class:`StepCheck` of a step whose gradients are being built."""
        return StepCheck(self)


class StepCheck:
    """What one step's detection needs, from the gradients to the verdict.

    Attributes:
      detector: the backend (see :mod:`npu_loss_scale.detection.backends`).
      reader: the register slot read; None = the device's view (slot 0; the end clears all).
      flags: float32 counts of overflowed gradients found in their values so far.
      status: the register's read (float32 vector, all zero = clean), once :meth:`read` ran.
      verdict: the found-overflow flag agreed across ranks, once :meth:`agree` ran.
    """

    def __init__(self, check, reader=None):
        self.check = check
        self.detector = check.detector
        self.reader = reader
        self.flags = []
        self.status = None
        self.verdict = None

    # -- the values -------------------------------------------------------------------------------
    def _counted(self, total):
        self.flags.append(total)
        return total

    def count_overflowed(self, grads):
        """float32 count of still-scaled gradients whose values hold an overflow as the backend
        sees it in the values (:meth:`~npu_loss_scale.detection.backends.OverflowDetector.value_test`
        with ±MAX counted)."""
        return self._counted(flags.count(grads, self.detector.value_test(count_saturated=True)))

    def check_and_unscale(self, grads, inv_scale):
        """One pass over ``grads``: (unscaled grads, float32 count of overflowed gradients).

        ``grads`` is a list whose entries are tensors, ``IndexedSlices`` or None; ``inv_scale`` an
        :class:`npu_loss_scale.scaling.unscale.Reciprocal` (``Reciprocal.of(scale)``: exact at every
        scale) or a float32 scalar used as one exact factor. Gradients are unscaled in float32
        (a reciprocal such as 2**-24 is not a float16 number) and cast back to their dtype.
        """
        out, total = flags.check_and_unscale(
            grads, self.detector.value_test(count_saturated=True), inv_scale, unscale_gradient)
        return out, self._counted(total)

    def count_nonfinite(self, grads):
        """float32 count of gradients (unscaled, or scaled) holding an inf or a NaN."""
        return self._counted(flags.count(grads, flags.nonfinite))

    # -- the register -----------------------------------------------------------------------------
    def uses_register(self):
        """True when the backend's register answers (not ``inf_nan``, not INF/NaN mode)."""
        return self.detector.uses_register()

    def read(self, after=()):
        """float32 scalar: 1.0 when the register says overflow, 0.0 when clean or when the
        register does not apply. The read is ordered after the tensors in ``after`` (the
        gradients); :meth:`end` clears what it read."""
        if not self.uses_register():
            return tf.zeros([], tf.float32)
        after = [t for t in after if t is not None]
        self.status = self.detector.read_status([], reader=self.reader, wait_for=after)
        return tf.cast(tf.reduce_any(tf.not_equal(self.status, 0)), tf.float32)

    def end(self, value):
        """Clears what :meth:`read` read (after ``value`` is computed); returns ``value``,
        ordered after the clear in a graph."""
        if self.status is None:
            return value
        with tf.control_dependencies([value]):
            cleared = self.detector.end_step(self.status, reader=self.reader)
        with tf.control_dependencies([cleared] if cleared is not None and
                                     not tf.executing_eagerly() else []):
            return tf.identity(value)

    # -- the agreement ----------------------------------------------------------------------------
    def agree(self, found):
        """Sums a float32 scalar flag over ranks when the front end ``is_distributed`` (else
        returns it); the result is the step's :attr:`verdict`."""
        if self.check.is_distributed:
            agreement = agreement_lib.make_agreement(self.check.agreement,
                                                     self.check.backend_name)
            found = tf.reshape(agreement.reduce(tf.reshape(tf.cast(found, tf.float32), [1])), [])
        self.verdict = found
        return found


__all__ = ["OverflowCheck", "StepCheck"]
