"""Assertions on one training step's :class:`~npu_loss_scale.StepReport` and the overflow sites
of the last step (:func:`assert_no_overflow`, :func:`assert_step_skipped`,
:func:`overflow_sites`)."""
import importlib
import sys


_ACCEPTED_STEPS = (
    "the dict of sess.run(opt.step_report) (NPULossScaleOptimizer; fetch it with the train op), "
    "a LossScaleHook or one record of its history, the Keras NpuLossScaleOptimizer after a "
    "step, a GradScaler after step() and before update(), a localisation StepOverflowRecord, "
    "or any StepReport (npu_loss_scale.StepReport)")


def _step_outcome(step, helper):
    """(overflowed, skipped, details) of one training step, from its
    :class:`~npu_loss_scale.StepReport` (or a plain dict of one, or an object with a
    ``step_report`` attribute).

    For every front end an overflowed step is a skipped one; only a localisation record tells
    the two apart (sites found, and whether the step was skipped).
    """
    report = _report_of(step, helper)
    if report.overflowed is None:
        raise ValueError("%s: the step has no overflow check (its report holds no verdict, as "
                         "NPULossScaleOptimizer's with a FixedLossScaleManager(enable_overflow_"
                         "check=False) and accumulation_steps > 1): nothing to assert" % helper)
    return report.overflowed, report.skipped, report.details


def _report_of(step, helper):
    """The StepReport ``step`` is or gives."""
    # imported here: loading the plugin imports none of the package
    from npu_loss_scale._internal.report import StepReport, of_record  # pylint: disable=import-outside-toplevel
    if isinstance(step, dict):
        # a StepReport without a verdict is a step with no overflow check (_step_outcome says so)
        if not isinstance(step, StepReport) and "finite" not in step and "overflow" not in step:
            raise TypeError("%s: a step dict needs a 'finite' key (sess.run(opt.step_report)) or "
                            "an 'overflow' key (LossScaleHook.history); got keys %s"
                            % (helper, sorted(step)))
        return step if isinstance(step, StepReport) else StepReport(step)
    if _is_graph_optimizer(step):   # its report is tensors, to fetch with the train op
        raise TypeError("%s: pass the step's report, not the optimizer: fetch it with the train "
                        "op, e.g. `_, report = sess.run([train_op, opt.step_report])`, then "
                        "%s(report)" % (helper, helper))
    if not hasattr(type(step), "step_report"):
        if hasattr(step, "sites") and hasattr(step, "skipped"):   # a localisation record
            return of_record(step)
        raise TypeError("%s: step must be %s; got %r (type %s)"
                        % (helper, _ACCEPTED_STEPS, step, type(step).__name__))
    try:
        return _report_of(step.step_report, helper)
    except ValueError as err:
        raise ValueError("%s: %s" % (helper, err)) from None


def _is_graph_optimizer(step):
    if "npu_loss_scale.optimizers.loss_scale" not in sys.modules:
        return False     # no NPULossScaleOptimizer was ever made in this process
    from npu_loss_scale.optimizers.loss_scale import NPULossScaleOptimizer  # pylint: disable=import-outside-toplevel
    return isinstance(step, NPULossScaleOptimizer)


def _describe(details):
    parts = []
    if "loss_scale" in details:
        scale = "loss scale %g" % details["loss_scale"]
        if "next_loss_scale" in details:
            scale += " -> %g" % details["next_loss_scale"]
        parts.append(scale)
    elif "next_loss_scale" in details:
        parts.append("loss scale after the step %g" % details["next_loss_scale"])
    for key, label in (("scale", "scale"), ("skipped_steps", "skipped steps"),
                       ("global_step", "global step"), ("iteration", "iteration"),
                       ("step", "step"), ("sites", "overflow sites")):
        if details.get(key) is not None:
            parts.append("%s %s" % (label, details[key]))
    return ", ".join(parts)


def _sites_note(step):
    """The overflow sites of ``step``: its own when it is a localisation record, else the last
    recorded ones while localisation is on (when it is off, a record left by an earlier graph of
    the process is no record of this step); "" when there are none."""
    record = step if hasattr(step, "sites") else None
    if record is None:
        try:
            localisation = importlib.import_module("npu_loss_scale.device.localisation")
            if localisation.enabled():
                record = localisation.last_record()
        except Exception:  # pylint: disable=broad-except
            return ""      # the note is extra information only; the assertion stands without it
    if record is None or not getattr(record, "sites", None):
        return ""
    shown = ["%s (%s, %s)" % (s.op_name, s.direction, s.dtype) for s in record.sites[:5]]
    more = "" if len(record.sites) <= 5 else " and %d more" % (len(record.sites) - 5)
    return "; overflow sites: " + ", ".join(shown) + more


def assert_no_overflow(step):
    """Fails unless the training step ``step`` had no overflow (and so was applied).

    ``step``: the dict of ``sess.run(opt.step_report)`` (NPULossScaleOptimizer), a
    ``LossScaleHook`` or a record of its ``history``, the Keras ``NpuLossScaleOptimizer`` after
    a step, a ``GradScaler`` after ``step()`` and before ``update()``, or a localisation
    ``StepOverflowRecord``.
    """
    __tracebackhide__ = True  # pylint: disable=unused-variable
    overflowed, _, details = _step_outcome(step, "assert_no_overflow")
    if overflowed:
        described = _describe(details)
        raise AssertionError("the step overflowed (and was skipped)%s%s"
                             % (": " + described if described else "", _sites_note(step)))


def assert_step_skipped(step):
    """Fails unless the training step ``step`` overflowed and was skipped (not applied).

    ``step``: as for :func:`assert_no_overflow`.
    """
    __tracebackhide__ = True  # pylint: disable=unused-variable
    overflowed, skipped, details = _step_outcome(step, "assert_step_skipped")
    if not skipped:
        described = _describe(details)
        what = ("it overflowed but was applied anyway" if overflowed
                else "no overflow was detected")
        raise AssertionError("the step was applied: %s%s"
                             % (what, ": " + described if described else ""))


def overflow_sites():
    """The overflow sites of the last recorded step (``OverflowSite`` objects: ``op_name``,
    ``direction`` "forward"/"backward", ``dtype``, ``magnitude``, ``order``, ``first``).

    Comes from :func:`npu_loss_scale.device.localisation.last_record`. Raises RuntimeError when that
    module is not available or when no step has been recorded yet (never an empty list for
    "unknown"); an empty list means the last step had no overflow site.
    """
    try:
        localisation = importlib.import_module("npu_loss_scale.device.localisation")
    except ModuleNotFoundError as exc:
        if exc.name not in ("npu_loss_scale.device.localisation", "npu_loss_scale"):
            raise
        raise RuntimeError("overflow_sites() needs npu_loss_scale.device.localisation (overflow-site "
                           "localisation), which this installation of npu_loss_scale does not "
                           "have") from exc
    record = localisation.last_record()
    if record is None:
        raise RuntimeError("overflow_sites(): no training step has been recorded yet "
                           "(npu_loss_scale.device.localisation.last_record() is None)")
    return list(record.sites)


__all__ = ["assert_no_overflow", "assert_step_skipped", "overflow_sites"]
