"""The doctor's configuration findings: what the loss scaler's own settings cost a run.

:func:`config_findings` reads the report's ``"scaler"`` object and one run's steps and returns
findings of three kinds (the report's ``"findings"`` shape, ``"verified"`` left None for the
doctor to fill):

* ``wasted_start``: the steps skipped before the first applied one. Where the steps carry
  ``max_safe_scale`` (the largest power-of-two scale the step's gradients allow, from the
  advisor's observation) the scaler's own rule (:mod:`.scalers`, the package's twins) is run
  forward with a step counted finite at a scale ``S <= B`` and overflowed at ``S >= 2 B``, ``B``
  being the smallest ``max_safe_scale`` of the run (the advisor's advice); a scale between the two
  depends on the gradient's exact size, so the count is then a range. With power-of-two scales
  the count is exact. Without the bound, the run's own leading skips are the count; and so they
  are where the run applied a step sooner than the rule with ``B`` says (``B`` came from later
  steps, whose gradients grew), the rule's count then in the evidence.
* ``scale_cannot_grow``: the scale ends the run at least a factor 2 below what the gradients allow
  and the run, at least one ``growth interval`` long, holds no stretch of that many applied steps
  in a row, which every rule needs to grow once (or the rule's ceiling is reached). A run shorter
  than the interval (a doctor's few steps) says nothing about growth: no finding.
* ``scale_pinned_at_minimum``: steps still skip with the scale at the lowest value its rule
  reaches (Ascend's and Keras's 1, Megatron's ``min_scale``, GradScaler's 2**-126, a fixed
  scale's own value), or the gradients allow less than that lowest value.

Each carries the recommended settings under the class's own argument names (fix kind
``"manager_setting"``) and the numbers in ``"evidence"`` and, as an optional key, ``"numbers"``.
"""
import math

from npu_loss_scale.tools.advisor import DEFAULT_MAX_SCALE
from npu_loss_scale.tools.doctor import scalers as _scalers

__all__ = ["config_findings", "safe_bound", "WASTE_WARNING_ABOVE"]

WASTE_WARNING_ABOVE = 3     # a start that wastes more steps than this is a warning


def config_findings(scaler, steps, *, run=None):
    """The configuration findings (a list of finding dicts) of one run.

    ``scaler``: the report's ``{"kind": ..., "settings": {...}}`` (kind None: no findings);
    ``steps``: the run's step dicts (``step``, ``loss_scale``, ``next_loss_scale``, ``skipped``,
    optionally ``max_safe_scale``); ``run``: the run's name (``"saturation"``, ``"inf_nan"``),
    added to the findings' ids and evidence when given, so that two runs' findings stay apart.
    """
    config = _scalers.from_report(scaler)
    if config is None or not config.enabled:
        return []
    steps = _checked_steps(steps)
    bound = safe_bound(steps)
    found = [_wasted_start(config, steps, bound), _cannot_grow(config, steps, bound),
             _pinned(config, steps, bound)]
    return [_named(finding, run) for finding in found if finding is not None]


def safe_bound(steps):
    """The smallest positive ``max_safe_scale`` of ``steps`` (None: not known; "inf": nothing
    bounds the scale, no float16 gradient). A 0 (the gradient overflowed even at the scale the
    step used) bounds nothing."""
    values = [_scalers.number(s["max_safe_scale"], "max_safe_scale") for s in steps
              if s.get("max_safe_scale") is not None]
    values = [v for v in values if v > 0]
    return min(values) if values else None


def _recommended(bound):
    """The advisor's advice from the bound: the bound itself, capped at its largest advice."""
    return None if bound is None else min(bound, DEFAULT_MAX_SCALE)


def _wasted_start(config, steps, bound):
    if config.fixed:
        return None       # a fixed scale skips all or nothing: _pinned says so
    leading = next((i for i, s in enumerate(steps) if not s["skipped"]), None)
    observed = len(steps) if leading is None else leading
    predicted = _predicted(config, bound)
    sooner = None   # the rule's count, where the run applied a step sooner than it predicts
    if predicted is not None:
        low, high = predicted
        if low is not None and leading is not None and low <= observed <= (
                math.inf if high is None else high):
            low = high = observed   # the run settled what the gradients' bound left open
        elif low is not None and leading is not None and observed < low:
            # the bound is the smallest of the run, from later steps whose gradients grew: the
            # run's own start is the count, the rule's says what today's gradients would waste
            sooner = _range_text(low, high)
            low = high = observed
        elif low is not None and leading is None:
            low = max(low, observed)
        if low is None or high == 0 or (high is not None and low > high):
            # never applies (pinned), the scale is not what skips the start, or more skips than
            # the scale explains (the overflow sites' findings say why)
            return None
        count, exact = low, _range_text(low, high)
    elif leading is None or observed == 0:
        return None       # no bound and no applied step: the count is unknown
    else:
        count, exact = observed, "exactly %d" % observed
    name, scale = config.scale_setting, config.initial
    if leading is None:
        seen = "the run skipped every one of its %d step(s)" % len(steps)
    else:
        seen = ("the run skipped %d of its %d steps before its first applied step (step %s, at "
                "scale %s)" % (observed, len(steps), steps[leading]["step"],
                               _fmt(steps[leading]["loss_scale"])))
    rule = ("; %s's rule, from %s=%s, with the observed gradients (largest safe scale %s) skips "
            "%s steps" % (config.class_name, name, _fmt(scale), _fmt(bound), sooner or exact)
            if bound is not None else "")
    if sooner:
        rule += (" (that largest safe scale is the smallest of the run's steps, reached after its "
                 "first applied step as the gradients grew: a start from them wastes more)")
    advice, why = _recommended(bound), "the largest scale the gradients allowed"
    if advice is None:
        advice = _scalers.number(steps[leading]["loss_scale"], "loss_scale")
        why = "the scale of the run's first applied step"
    return _finding(
        "wasted_start", "warning" if count > WASTE_WARNING_ABOVE else "info",
        "the start wastes %s steps before the first applied step" % exact, seen + rule,
        {name: advice}, "start at %s=%s, %s, so that the first step is applied; the rule still "
        "grows the scale later" % (name, _fmt(advice), why),
        {"wasted_steps": [low, high] if predicted is not None else [count, count],
         "observed_leading_skips": observed, "largest_safe_scale": bound,
         "initial_scale": scale})


def _range_text(low, high):
    """"exactly N", or "N to M" ("N to more": no upper end)."""
    if low == high:
        return "exactly %d" % low
    return "%d to %s" % (low, "%d" % high if high is not None else "more")


def _predicted(config, bound):
    """(low, high) skipped steps before the first applied one by the rule, with ``bound``; a
    None stands for "never"; None when there is no bound."""
    if bound is None:
        return None
    low = config.overflows_before_applied(lambda scale: scale < 2 * bound)
    high = config.overflows_before_applied(lambda scale: scale <= bound)
    return low, high


def _cannot_grow(config, steps, bound):
    if config.fixed or bound is None or not math.isfinite(bound) or not steps:
        return None
    last = steps[-1]
    final = last.get("next_loss_scale")
    final = _scalers.number(last["loss_scale"] if final is None else final, "next_loss_scale")
    if not final * 2 <= bound:
        return None
    used = [_scalers.number(s["loss_scale"], "loss_scale") for s in steps]
    grew = final > used[0] or any(b > a for a, b in zip(used, used[1:]))
    longest = _longest_applied(steps)
    interval = config.growth_interval
    if grew or (longest >= interval and config.can_grow_from(final)):
        return None
    if len(steps) < interval and config.can_grow_from(final):
        return None   # a window shorter than one growth interval cannot show it (the doctor's)
    advice = _recommended(bound)
    why = ("%s=%d needs %d applied steps in a row for each growth, and the run's longest stretch "
           "is %d of its %d steps" % (config.growth_setting, interval, interval, longest,
                                      len(steps)))
    if not config.can_grow_from(final):
        why = "the rule's ceiling is reached: %s cannot grow" % _fmt(final)
    return _finding(
        "scale_cannot_grow", "warning",
        "the scale %s cannot grow within the run, the gradients allow %s" % (
            _fmt(final), _fmt(bound)),
        "the scale ends the run at %s, %s times below the largest safe scale %s; %s"
        % (_fmt(final), "%g" % (bound / final), _fmt(bound), why),
        {config.scale_setting: advice},
        "start at %s=%s so that the scale needs no growth to use the float16 range the gradients "
        "leave; a shorter %s only helps if the scale must recover within %d steps"
        % (config.scale_setting, _fmt(advice), config.growth_setting, len(steps)),
        {"final_scale": final, "largest_safe_scale": bound, "growth_interval": interval,
         "longest_applied_stretch": longest, "run_steps": len(steps)})


def _longest_applied(steps):
    longest = current = 0
    for step in steps:
        current = 0 if step["skipped"] else current + 1
        longest = max(longest, current)
    return longest


def _pinned(config, steps, bound):
    minimum = config.minimum
    at_min = [s for s in steps if s["skipped"]
              and _scalers.number(s["loss_scale"], "loss_scale") <= minimum * (1 + 1e-6)]
    observed = len(at_min) >= 2 or (bool(at_min) and at_min[-1] is steps[-1])
    too_high = bound is not None and minimum > bound
    if not (observed or too_high):
        return None
    if config.fixed and bound is not None and not too_high:
        return None       # the fixed scale fits the gradients: what skips is not the scale
    lowest = ("the fixed scale %s" % _fmt(minimum) if config.fixed
              else "its minimum %s" % _fmt(minimum))
    seen = ("%d skipped step(s) at %s (steps %s)" % (len(at_min), lowest, _steps_list(at_min))
            if at_min else "no step at %s yet" % lowest)
    name = "min_scale" if config.kind == "megatron_dynamic" else config.scale_setting
    if too_high:
        settings = {name: _recommended(bound)}
        return _finding(
            "scale_pinned_at_minimum", "error",
            "the scale cannot go below %s, the gradients allow at most %s" % (
                _fmt(minimum), _fmt(bound)),
            "%s; the largest safe scale of the observed gradients is %s, below %s: every step "
            "at it overflows" % (seen, _fmt(bound), lowest),
            settings, "lower %s to %s, the largest scale the gradients allow" % (
                name, _fmt(_recommended(bound))),
            {"minimum": minimum, "largest_safe_scale": bound, "skipped_at_minimum": len(at_min)})
    if bound is None and minimum > 1:
        description = ("the scale cannot go below %s: observe the gradients' largest safe scale "
                       "(npu-emulate --advise) and set %s to it" % (_fmt(minimum), name))
    else:
        description = ("no setting of %s removes these skips: the overflow happens whatever the "
                       "scale. Keep the overflowing op in float32 or mask its input before it "
                       "(see the overflow sites' findings)" % config.class_name)
    fits = ("; the gradients allow %s, so the overflow is not the scaled gradients': no scale "
            "removes it" % _fmt(bound)) if bound is not None else ""
    return _finding(
        "scale_pinned_at_minimum", "error",
        "steps still skip with the scale at %s" % lowest, seen + fits, None, description,
        {"minimum": minimum, "largest_safe_scale": bound, "skipped_at_minimum": len(at_min)})


def _finding(kind, severity, title, evidence, settings, description, numbers):
    fix = {"kind": "manager_setting" if settings else "code_edit", "description": description,
           "applies_without_edit": bool(settings), "modify_mixlist": None,
           "settings": settings or None, "code": None}
    return {"id": kind.replace("_", "-"), "kind": kind, "severity": severity, "title": title,
            "evidence": evidence, "site": None, "fix": fix, "verified": None,
            "numbers": numbers}


def _named(finding, run):
    if run is not None:
        finding["id"] = "%s/%s" % (finding["id"], run)
        finding["evidence"] = "(%s run) %s" % (run, finding["evidence"])
    return finding


def _checked_steps(steps):
    if not isinstance(steps, (list, tuple)):
        raise ValueError("steps must be a run's list of step dicts; got %r" % (steps,))
    for step in steps:
        if not isinstance(step, dict) or "loss_scale" not in step or "skipped" not in step:
            raise ValueError("each step must be a dict with at least 'step', 'loss_scale' and "
                             "'skipped'; got %r" % (step,))
        if not isinstance(step["skipped"], bool):
            raise ValueError("a step's 'skipped' must be True or False; got %r in %r"
                             % (step["skipped"], step))
        _scalers.number(step["loss_scale"], "a step's loss_scale")
    return list(steps)


def _steps_list(steps, most=8):
    numbers = [str(s.get("step")) for s in steps]
    return ", ".join(numbers[:most]) + (", ..." if len(numbers) > most else "")


def _fmt(value):
    """A scale as people read it: ``32768 (2**15)``; other numbers with 4 digits."""
    if value is None:
        return "-"
    value = float(value)
    if value > 0 and math.isfinite(value):
        exponent = math.log2(value)
        if exponent == int(exponent) and abs(exponent) >= 4:
            return "%.10g (2**%d)" % (value, exponent)
    return "%.4g" % value
