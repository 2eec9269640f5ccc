"""StepReport: what one training step did, in the one shape every front end reports it.

A ``dict`` (so code that reads ``report["finite"]`` keeps working) with read-only properties over
the keys any front end may fill:

=================  ==============================================================================
key                meaning
=================  ==============================================================================
``finite``         the step's gradients were finite and it was applied (absent or ``None``: the
                   step had no overflow check, a ``FixedLossScaleManager(enable_overflow_check=
                   False)`` accumulating)
``overflow``       the opposite of ``finite`` (``LossScaleHook``'s records, ``GradScaler``)
``skipped``        the step was skipped (only where it can differ from ``overflow``: a
                   localisation record whose sites did not decide a skip)
``loss_scale``     the scale the step's loss was multiplied by
``next_loss_scale``  the scale after the step's update
``scale``          ``GradScaler``'s scale (``get_scale()``)
``skipped_steps``, ``global_step``, ``iteration``, ``step``, ``sites``  counters, when known
=================  ==============================================================================

Pseudocode of the two verdicts::

    overflowed = (not finite) if "finite" in report else overflow      # None: not checked
    skipped = report["skipped"] if "skipped" in report else overflowed

Who gives one: ``NPULossScaleOptimizer.step_report`` (tensors; fetch it with the train op and
``sess.run`` gives back a ``StepReport`` of values), and the ``step_report`` attribute of a
``GradScaler`` (between ``step()`` and ``update()``), the Keras ``NpuLossScaleOptimizer`` (after
a step), a ``LossScaleHook`` (its last record; each record of its ``history`` is one) and a
localisation ``StepOverflowRecord``. The pytest plugin's ``assert_no_overflow`` and
``assert_step_skipped`` read any of them.

Example::

    _, report = sess.run([train_op, opt.step_report])
    if report.overflowed:
        print("skipped at loss scale", report.loss_scale)

``tf.compat.v1.Session.run`` rebuilds a fetched dict as its own type (TensorFlow 1.15 with
``type(fetch)()`` and item assignment, 2.x with ``type(fetch)(pairs)``): both forms construct a
``StepReport``.
"""
import numpy as np

#: The keys of a step's verdict, and every key a StepReport may hold (verdict first, then its
#: numbers in the order reports describe them).
VERDICT_KEYS = ("finite", "overflow", "skipped")
KEYS = VERDICT_KEYS + ("loss_scale", "next_loss_scale", "scale", "skipped_steps", "global_step",
                       "iteration", "step", "sites")


def _plain(value):
    """A Python number or bool for a NumPy value (a tensor or anything else as it is)."""
    if isinstance(value, (np.ndarray, np.generic)) and np.size(value) == 1:
        return np.asarray(value).item()
    return value


class StepReport(dict):
    """One training step's outcome (see the module docstring for the keys)."""

    def _get(self, key):
        return _plain(self.get(key))

    @property
    def checked(self):
        """False when the step had no overflow check (no ``finite`` or ``overflow``, or None)."""
        return self.overflowed is not None

    @property
    def overflowed(self):
        """True when the step's gradients overflowed; None when unchecked (or unknown)."""
        if "finite" in self:
            finite = self._get("finite")
            return None if finite is None else not finite
        overflow = self._get("overflow")
        return None if overflow is None else bool(overflow)

    @property
    def skipped(self):
        """True when the step was not applied (for every front end: when it overflowed)."""
        if "skipped" in self and self["skipped"] is not None:
            return bool(self._get("skipped"))
        return self.overflowed

    @property
    def loss_scale(self):
        """The loss scale of the step (``scale`` for a GradScaler), or None."""
        return self._get("loss_scale") if "loss_scale" in self else self._get("scale")

    @property
    def details(self):
        """``{key: plain value}`` of the step's numbers that are known (not None), in
        :data:`KEYS` order, verdicts left out."""
        return {key: self._get(key) for key in KEYS
                if key not in VERDICT_KEYS and self.get(key) is not None}

    def __repr__(self):
        return "StepReport(%s)" % dict.__repr__(self)


def of_record(record):
    """The StepReport of a localisation record (anything with ``step``, ``sites`` and
    ``skipped``, as :class:`~npu_loss_scale.device.localisation.StepOverflowRecord`): the step
    overflowed when sites were found or it was skipped."""
    return StepReport(overflow=bool(record.skipped) or bool(record.sites),
                      skipped=bool(record.skipped), step=getattr(record, "step", None),
                      sites=len(record.sites))


__all__ = ["StepReport", "KEYS", "VERDICT_KEYS", "of_record"]
