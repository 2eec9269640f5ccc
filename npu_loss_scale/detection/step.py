"""One training step's overflow detection, for every front end: ``NPULossScaleOptimizer`` (its
accumulation and Megatron's optimizer included), GradScaler, the optimizer thread and both Keras
optimizers.

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
object is then passed to the read, the agreement and the end. Two shapes of a step use it:

* the TF2 front ends test values (:meth:`StepCheck.count_overflowed` ...), read a scalar flag
  (:meth:`StepCheck.read`), agree on it (:meth:`StepCheck.agree`) and end the read
  (:meth:`StepCheck.end`);
* ``NPULossScaleOptimizer`` checks each micro-batch's still-scaled gradients when
  ``compute_gradients`` builds them (:meth:`OverflowCheck.observe`, which marks them as checked),
  then, once per step at ``apply_gradients``, reads the status vector of every replica of a
  ``tf.distribute`` strategy with the flags of the gradients already checked and a test of the
  others (:meth:`StepCheck.read_replicas`, which also ends each read: :attr:`StepCheck.end_ops`),
  and agrees on the vector across ranks (:meth:`StepCheck.agree_status`).
"""
import itertools

import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale import agreement as agreement_lib
from npu_loss_scale.detection import _observed
from npu_loss_scale.detection import backends
from npu_loss_scale.detection import flags
from npu_loss_scale.scaling.unscale import unscale_gradient

_mark_ids = itertools.count()


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
        # The graph attribute under which observe() marks the gradients it checked (one per check).
        self.marks = "_npu_loss_scale_observed_%d" % next(_mark_ids)
        self._detector = None

    @property
    def detector(self):
        """The backend (made at the first step: ``npu`` needs npu_bridge only once it reads)."""
        if self._detector is None:
            self._detector = backends.make_detector(self.backend_name)
        return self._detector

    def reader(self):
        """A register slot of its own for one optimizer in one graph (None: the backend keeps
        none, or the device's view); hand it to :meth:`start`."""
        return self.detector.reader()

    def start(self, reader=None):
        """The :class:`StepCheck` of a step whose gradients are being built, reading ``reader``."""
        return StepCheck(self, reader)

    # -- gradients checked when they are built ----------------------------------------------------
    def observe(self, grads, readers=None, reciprocal=None):
        """Checks one micro-batch's still-scaled gradients as they are built: (tensor the step's
        read waits for or None, float32 flag or None when the register covers them). See
        :meth:`~npu_loss_scale.detection.backends.OverflowDetector.observe_scaled_gradients` for
        ``readers`` and ``reciprocal``. Pass the result to :meth:`mark`."""
        return self.detector.observe_scaled_gradients(grads, readers, reciprocal)

    def mark(self, grads_and_vars, observation):
        """Notes, in the graph being built, that ``observation`` (from :meth:`observe`) covers
        these (unscaled) gradients: :meth:`StepCheck.read_status` with ``observed=True`` then
        uses its flag for them, and for gradients computed from them, instead of a second pass."""
        _observed.mark(self.marks, grads_and_vars, observation)


class StepCheck:
    """What one step's detection needs, from the gradients to the verdict.

    Attributes:
      detector: the backend (see :mod:`npu_loss_scale.detection.backends`).
      reader: the register slot read; None = the device's view (slot 0; the end clears all).
      flags: float32 counts of overflowed gradients found in their values so far.
      status: the register's read (float32 vector, all zero = clean), once :meth:`read` ran;
        after :meth:`read_replicas`, the status summed over the replicas.
      end_ops: the ops clearing what :meth:`read_replicas` read (one per replica).
      verdict: the found-overflow flag (:meth:`agree`) or status vector (:meth:`agree_status`)
        agreed across ranks, once it ran.
    """

    def __init__(self, check, reader=None):
        self.check = check
        self.detector = check.detector
        self.reader = reader
        self.flags = []
        self.status = None
        self.end_ops = []
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
        status = self._read([], (), [t for t in after if t is not None])
        return tf.cast(tf.reduce_any(tf.not_equal(status, 0)), tf.float32)

    def read_status(self, grads_and_vars, observed=False):
        """One replica's status vector (all zero = clean): the backend's read of the register (or
        its IEEE test), with the flags of the gradients :meth:`OverflowCheck.observe` covered
        (``observed``) and one test of the others, ordered after every gradient."""
        grads = [g for g, _ in grads_and_vars if g is not None]
        if observed:
            known, waits, unchecked = _observed.split(self.check.marks, grads_and_vars)
        else:
            known, waits, unchecked = [], [], grads
        return self._read(unchecked, known, grads + waits)

    def read_replicas(self, distribution, grads_and_vars, observed=False):
        """The step's status vector: under a ``tf.distribute`` strategy each replica reads
        (:meth:`read_status`) and the reads are summed; else this replica's read. Each read is
        then ended (:attr:`end_ops` clear what was read)."""
        if tf.distribute.has_strategy():
            extended = distribution.extended
            per_replica = extended.call_for_each_replica(self.read_status,
                                                         args=(grads_and_vars, observed))
            status = distribution.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            ends = extended.call_for_each_replica(self._end_read, args=(per_replica,))
            ends = tf.nest.flatten(distribution.experimental_local_results(ends))
        else:
            status = self.read_status(grads_and_vars, observed)
            ends = [self._end_read(status)]
        self.end_ops = [op for op in ends if op is not None]
        self.status = status
        return status

    def _read(self, unchecked, known_flags, wait_for):
        """The backend's read, the one path every read of a step takes."""
        self.status = self.detector.read_status(unchecked, reader=self.reader,
                                                known_flags=known_flags, wait_for=wait_for)
        return self.status

    def _end_read(self, status):
        """The op (or None) clearing what the read of ``status`` read."""
        return self.detector.end_step(status, reader=self.reader)

    def end(self, value):
        """Clears what :meth:`read` read (after ``value`` is computed); returns ``value``,
        ordered after the clear in a graph."""
        if self.status is None:
            return value
        with tf.control_dependencies([value]):
            cleared = self._end_read(self.status)
        with tf.control_dependencies([cleared] if cleared is not None and
                                     not tf.executing_eagerly() else []):
            return tf.identity(value)

    # -- the agreement ----------------------------------------------------------------------------
    def agree(self, found):
        """Sums a float32 scalar flag over ranks when the front end ``is_distributed`` (else
        returns it); the result is the step's :attr:`verdict`."""
        if self.check.is_distributed:
            found = tf.reshape(self._reduce(tf.reshape(tf.cast(found, tf.float32), [1])), [])
        self.verdict = found
        return found

    def agree_status(self, status):
        """Sums the status vector over ranks when the front end ``is_distributed`` (one
        collective); else returns it, warning once per process when the run looks like one rank
        of several (:func:`~npu_loss_scale.agreement.warn_if_ranks_may_diverge`). The result is
        the step's :attr:`verdict`."""
        if self.check.is_distributed:
            status = self._reduce(status)
        else:
            agreement_lib.warn_if_ranks_may_diverge()
        self.verdict = status
        return status

    def _reduce(self, status):
        agreement = agreement_lib.make_agreement(self.check.agreement, self.check.backend_name)
        return agreement.reduce(status)


__all__ = ["OverflowCheck", "StepCheck"]
