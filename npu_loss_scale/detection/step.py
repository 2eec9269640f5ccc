"""Per-step overflow check shared by the TF2 front ends (GradScaler, Keras NpuLossScaleOptimizer).

"Did anything overflow this step?" is answered from the same sources as
:class:`~npu_loss_scale.NPULossScaleOptimizer`, chosen by
:func:`npu_loss_scale.get_backend_name`:

* ``npu`` in saturation mode: the device's float-status register
  (``npu_get_float_status_v2``), read once the gradients exist and cleared after the read;
* ``emulation`` in saturation mode: the emulated register, plus a check of the gradients
  themselves (a value that is inf, NaN or at ±MAX of its dtype counts; code outside
  :func:`~npu_loss_scale.device.register.saturate` still makes IEEE infs on a CPU);
* ``inf_nan`` backend, or INF/NaN mode on any backend: ``is_finite`` of the gradients only.

The register is sticky from one read to the next, so it also holds overflows from the forward
pass (and from earlier micro-batches) of the step.
"""
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale import agreement as agreement_lib
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation
from npu_loss_scale.scaling.unscale import unscale_gradient


def _values(grad):
    if isinstance(grad, tf.IndexedSlices):
        return grad.values
    return tf.convert_to_tensor(grad)


class OverflowCheck:
    """The detection side of one front end; see the module docstring.

    Args:
      backend: ``"npu"``, ``"emulation"``, ``"inf_nan"`` or None (see ``get_backend_name``).
      is_distributed: sum the found-overflow flag over ranks (one collective per call of
        :meth:`agree`).
      agreement: how ranks agree (see :mod:`npu_loss_scale.agreement`); None = discovered.
    """

    def __init__(self, backend=None, is_distributed=False, agreement=None):
        self.backend_name = detection.get_backend_name(backend)
        self.is_distributed = bool(is_distributed)
        if agreement is not None and not isinstance(agreement, agreement_lib.Agreement):
            _checks.one_of("agreement", agreement, agreement_lib.AGREEMENT_NAMES)
        self._agreement_choice = agreement
        self._status_ops = None

    # -- which sources apply (read when ops are built, as the mode is) ----------------------------
    def uses_register(self):
        return self.backend_name != "inf_nan" and not emulation.is_inf_nan_enabled()

    def _checks_max_values(self):
        return self.backend_name == "emulation" and not emulation.is_inf_nan_enabled()

    def _ops(self):
        if self._status_ops is None:
            if self.backend_name == "npu":
                ops = detection.npu_bridge_gen_ops()
                self._status_ops = (ops.npu_get_float_status_v2, ops.npu_clear_float_status_v2)
            else:
                self._status_ops = (emulation.npu_get_float_status_v2,
                                    emulation.npu_clear_float_status_v2)
        return self._status_ops

    # -- the pieces -------------------------------------------------------------------------------
    def read_and_clear_register(self, after=()):
        """float32 scalar (1.0 = the register says overflow, 0.0 = clean), register cleared.

        Returns 0.0 when the register does not apply (inf_nan backend or INF/NaN mode). The read is
        ordered after the tensors in ``after`` (the gradients).
        """
        if not self.uses_register():
            return tf.zeros([], tf.float32)
        get_status, clear_status = self._ops()
        after = [t for t in after if t is not None]
        with tf.control_dependencies(after):
            words = get_status()
        flag = tf.cast(tf.reduce_any(tf.not_equal(words, 0)), tf.float32)
        with tf.control_dependencies([flag]):
            cleared = clear_status()
        with tf.control_dependencies([cleared] if cleared is not None and
                                     not tf.executing_eagerly() else []):
            return tf.identity(flag)

    def bad_values(self, values):
        """bool scalar: ``values`` hold an overflow as this backend sees it in the values."""
        if self.backend_name == "npu" and not emulation.is_inf_nan_enabled():
            return tf.constant(False)  # saturation mode on the device: the register says it all
        if self._checks_max_values():
            # |g| < MAX is False for ±MAX, ±inf and NaN alike: one comparison covers all three.
            return tf.logical_not(tf.reduce_all(
                tf.less(tf.abs(values), tf.constant(values.dtype.max, values.dtype))))
        return tf.logical_not(tf.reduce_all(tf.math.is_finite(values)))

    def check_and_unscale(self, grads, inv_scale):
        """One pass over ``grads``: (unscaled grads, float32 scalar count of bad gradients).

        ``grads`` is a list whose entries are tensors, ``IndexedSlices`` or None; ``inv_scale`` an
        :class:`npu_loss_scale.scaling.unscale.Reciprocal` (``Reciprocal.of(scale)``: exact at every
        scale) or a float32 scalar used as one exact factor. Gradients are unscaled in float32
        (a reciprocal such as 2**-24 is not a float16 number) and cast back to their dtype.
        """
        out, bad = [], []
        for g in grads:
            if g is None:
                out.append(None)
                continue
            values = _values(g)
            if not values.dtype.is_floating:
                out.append(g)
                continue
            bad.append(self.bad_values(values))
            out.append(unscale_gradient(g if isinstance(g, tf.IndexedSlices) else values,
                                        inv_scale))
        count = (tf.reduce_sum(tf.cast(tf.stack(bad), tf.float32)) if bad
                 else tf.zeros([], tf.float32))
        return out, count

    def count_bad(self, grads):
        """float32 scalar count of gradients (already unscaled or not) holding an inf or NaN."""
        flags = [tf.logical_not(tf.reduce_all(tf.math.is_finite(_values(g))))
                 for g in grads if g is not None and _values(g).dtype.is_floating]
        if not flags:
            return tf.zeros([], tf.float32)
        return tf.reduce_sum(tf.cast(tf.stack(flags), tf.float32))

    def agree(self, found):
        """Sums a float32 scalar flag over ranks when ``is_distributed`` (else returns it)."""
        if not self.is_distributed:
            return found
        agreement = agreement_lib.make_agreement(self._agreement_choice, self.backend_name)
        return tf.reshape(agreement.reduce(tf.reshape(tf.cast(found, tf.float32), [1])), [])
