"""The doctor's mode findings: which saturation mode a run had, where it came from, and what
changes with the mode.

:func:`effective_mode` resolves the mode as the emulation does: a ``set_device_sat_mode`` call of
the script (TF1 ``npu_plugin``, TF2 ``npu_device``) over the emulate option (``--sat-mode``, which
sets ``NPU_LOSS_SCALE_SAT_MODE`` for the script) over ``NPU_LOSS_SCALE_SAT_MODE`` over the
default, saturation (the Atlas training series' mode). The variables Ascend's own runtime reads
(``INF_NAN_MODE_ENABLE``, ``INF_NAN_MODE_FORCE_DISABLE``) are reported but the emulation does not
honour them, and ``source_detail`` says so.

:func:`mode_findings` gives ``mode_source`` (the effective mode, its source, and what the device's
adapter does in that mode), ``mode_difference`` (the saturation and INF/NaN runs' skip sequences
side by side when they differ over the steps both made; none when a run made no step) and ``fp32_to_fp16`` (the device's default ``precision_mode``
turns a float32 script's matmuls into float16). Pure Python: no TensorFlow.
"""

__all__ = ["effective_mode", "mode_findings", "MODE_ENV_VAR", "ASCEND_MODE_VARS", "MODES"]

MODES = ("saturation", "inf_nan")                 # the device's numbers 0 and 1
_SPOKEN = {"saturation": "saturation", "inf_nan": "INF/NaN"}
MODE_ENV_VAR = "NPU_LOSS_SCALE_SAT_MODE"
# Ascend runtime variables (PyTorch's adapter documents them): 1 asks for INF/NaN mode, and on
# Atlas A2/A3 FORCE_DISABLE=1 keeps saturation.
ASCEND_MODE_VARS = ("INF_NAN_MODE_ENABLE", "INF_NAN_MODE_FORCE_DISABLE")
TF1_FRONT_ENDS = ("NPULossScaleOptimizer", "Estimator", "MegatronMixedPrecisionOptimizer")
KERAS_FRONT_END = "NpuLossScaleOptimizer (Keras)"
_CALLS = {"tf1": "npu_plugin.set_device_sat_mode(%d)  # from npu_bridge.npu_init import *",
          "tf2": "npu_device.set_device_sat_mode(%d)  # after npu_device.open().as_default()"}


def _mode_number(value, what, accepted):
    given = value
    if isinstance(value, str):
        name = value.strip().lower()
        if name in MODES:
            return MODES.index(name)
        try:
            value = int(name)
        except ValueError:
            pass
    if isinstance(value, bool) or value not in (0, 1):
        raise ValueError("%s must be %s; got %r" % (what, accepted, given))
    return int(value)


def effective_mode(environ, option=None, script_call=None, *, call_site=None):
    """The run's mode: ``{"effective": "saturation" | "inf_nan", "source": "script" | "option" |
    "environment" | "default", "source_detail": str, "ascend_environment": {name: value}}``.

    ``environ``: the script's environment (a dict); ``option``: the emulate option's mode (0, 1,
    or a name; None: not given); ``script_call``: the mode of the script's own
    ``set_device_sat_mode`` call (None: it made none); ``call_site``: where that call is
    (``"train.py line 12"``), for ``source_detail``."""
    if not hasattr(environ, "get"):
        raise ValueError("environ must be a dict of the script's environment variables; got %r"
                         % (environ,))
    ascend = {name: environ[name] for name in ASCEND_MODE_VARS if name in environ}
    raw = environ.get(MODE_ENV_VAR)
    env_mode = None
    if raw is not None and str(raw).strip() != "":
        env_mode = _mode_number(raw, "environment variable %s" % MODE_ENV_VAR,
                                "0 or saturation, 1 or inf_nan")
    if script_call is not None:
        mode = _mode_number(script_call, "script_call", "0 or 1 (set_device_sat_mode's argument)")
        source = "script"
        detail = "set_device_sat_mode(%d) in %s" % (mode, call_site or "the script")
        overruled = [("--sat-mode %s" % MODES[_mode_number(option, "option", "0 or 1")])
                     if option is not None else None,
                     "%s=%s" % (MODE_ENV_VAR, raw) if env_mode is not None else None]
        overruled = [o for o in overruled if o]
        if overruled:
            detail += ", over %s" % " and ".join(overruled)
    elif option is not None:
        mode = _mode_number(option, "option", "0 or saturation, 1 or inf_nan")
        source, detail = "option", "--sat-mode %s (sets %s for the script)" % (
            MODES[mode], MODE_ENV_VAR)
    elif env_mode is not None:
        mode, source, detail = env_mode, "environment", "%s=%s" % (MODE_ENV_VAR, raw)
    else:
        mode, source = 0, "default"
        detail = "nothing set the mode: saturation, the Atlas training series' default"
    if ascend:
        detail += "; %s set, which Ascend's runtime reads but the emulation does not honour " \
                  "(use %s or --sat-mode)" % (
                      ", ".join("%s=%s" % item for item in sorted(ascend.items())), MODE_ENV_VAR)
    return {"effective": MODES[mode], "source": source, "source_detail": detail,
            "ascend_environment": ascend}


def _ascend_asks(ascend):
    """The mode Ascend's variables ask for (None: they ask for none): FORCE_DISABLE=1 keeps
    saturation, ENABLE=1 asks for INF/NaN, ENABLE=0 for saturation."""
    if str(ascend.get("INF_NAN_MODE_FORCE_DISABLE", "")).strip() == "1":
        return "saturation"
    enable = str(ascend.get("INF_NAN_MODE_ENABLE", "")).strip()
    return {"1": "inf_nan", "0": "saturation"}.get(enable)


def _adapter_notes(mode, front_end):
    """What the device's own adapter does in ``mode`` for ``front_end``, where the emulation
    differs or where scripts are caught out."""
    notes = []
    if front_end in TF1_FRONT_ENDS:
        notes.append("npu_bridge's NPULossScaleOptimizer (TF1 adapter) leaves global_step "
                     "unchanged on a skipped step")
        if mode == "inf_nan":
            notes.append("in INF/NaN mode it defers to TensorFlow's own loss-scale optimizer "
                         "(a per-gradient is_finite test): no all-reduce of the overflow flag, "
                         "is_distributed is ignored and ranks can decide differently, where the "
                         "emulation still honours is_distributed")
    elif front_end == KERAS_FRONT_END:
        notes.append("npu_device's NpuLossScaleOptimizer (TF2 adapter) still advances iterations "
                     "on a skipped step (Keras 2; the package's class on Keras 3 counts applied "
                     "steps only)")
        if mode == "inf_nan":
            notes.append("in INF/NaN mode it defers to Keras's own finite check")
    if mode == "saturation":
        notes.append("in saturation mode an overflow clamps to +-65504 and only the sticky "
                     "float-status register sees it: an overflow anywhere in the step, even in "
                     "a value that never reaches the loss, skips the step")
    return notes


def _sequence(steps):
    return "".join("S" if s.get("skipped") else "." for s in steps)


def _call(front_end, mode):
    flavour = "tf2" if front_end in (KERAS_FRONT_END, "GradScaler") else "tf1"
    return _CALLS[flavour] % MODES.index(mode)


def _finding(fid, kind, severity, title, evidence, fix):
    return {"id": fid, "kind": kind, "severity": severity, "title": title, "evidence": evidence,
            "site": None, "fix": fix, "verified": None}


def _fix(kind, description, code=None, applies=False):
    return {"kind": kind, "description": description, "applies_without_edit": applies,
            "modify_mixlist": None, "settings": None, "code": code}


def mode_findings(mode, runs, front_end=None, precision_mode=None, *, float32_script=None):
    """The mode findings (a list of finding dicts).

    ``mode``: the report's mode object (:func:`effective_mode`'s result); ``runs``: the report's
    runs ({"saturation": {"steps": [...]}, "inf_nan": {...}}, either may be missing);
    ``front_end``: the report's front end; ``precision_mode``: the run's (None: none applied);
    ``float32_script``: whether the script computes in float32 (None: not known)."""
    if not isinstance(mode, dict) or mode.get("effective") not in MODES:
        raise ValueError("mode must be the report's mode object with 'effective' one of %s; "
                         "got %r" % (", ".join(MODES), mode))
    if not isinstance(runs, dict):
        raise ValueError("runs must be the report's runs, a dict mode name -> run; got %r"
                         % (runs,))
    effective = mode["effective"]
    other = MODES[1 - MODES.index(effective)]
    difference = _difference(runs, effective, other, front_end)
    # the adapter's behaviour in the mode goes with the difference when there is one
    found = [_source(mode, effective, other, None if difference else front_end)]
    if difference is not None:
        found.append(difference)
    if precision_mode in (None, "allow_fp32_to_fp16") and float32_script is not False:
        found.append(_fp32_to_fp16(precision_mode, float32_script))
    return found


def _source(mode, effective, other, front_end):
    evidence = "%s, from %s: %s" % (effective, mode.get("source"), mode.get("source_detail"))
    notes = _adapter_notes(effective, front_end)
    if notes:
        evidence += ". On the device: " + "; ".join(notes)
    asks = _ascend_asks(mode.get("ascend_environment") or {})
    severity = "warning" if asks is not None and asks != effective else "info"
    if severity == "warning":
        evidence += ". Ascend's variables ask for %s: on a device that honours them the run " \
                    "differs from this one" % asks
    return _finding(
        "mode-source", "mode_source", severity,
        "the run is in %s mode (%s)" % (_SPOKEN[effective], mode.get("source")),
        evidence,
        _fix("sat_mode", "to run in %s mode instead, call set_device_sat_mode(%d) before the "
             "graph runs (or give the emulation --sat-mode %s); the Atlas training series (910) "
             "has saturation mode only" % (other, MODES.index(other), other),
             _call(front_end, other), applies=True))


def _difference(runs, effective, other, front_end):
    mine, theirs = runs.get(effective), runs.get(other)
    if not (isinstance(mine, dict) and isinstance(theirs, dict)):
        return None
    a, b = _sequence(mine.get("steps") or []), _sequence(theirs.get("steps") or [])
    common = min(len(a), len(b))   # a run stopped early is compared over the steps both made
    if common == 0 or a[:common] == b[:common]:
        return None
    a, b = a[:common], b[:common]
    skipped = {effective: a.count("S"), other: b.count("S")}
    width = max(len(effective), len(other))
    evidence = ("skipped steps (S skipped, . applied), step 1 first:\n  %s %s  (%d of %d)\n"
                "  %s %s  (%d of %d)" % (effective.ljust(width), a, skipped[effective], len(a),
                                         other.ljust(width), b, skipped[other], len(b)))
    if len(mine.get("steps") or []) != len(theirs.get("steps") or []):
        evidence += "\n(the first %d steps, which both runs made)" % common
    notes = _adapter_notes(effective, front_end)
    if notes:
        evidence += "\nthe device's adapter in %s mode: %s" % (effective, "; ".join(notes))
    worse = skipped[effective] > skipped[other]
    return _finding(
        "mode-difference", "mode_difference", "warning" if worse else "info",
        "the %s run skips %d step(s), the %s run %d" % (effective, skipped[effective], other,
                                                        skipped[other]),
        evidence,
        _fix("sat_mode", ("the %s run skips fewer steps: call set_device_sat_mode(%d) (INF/NaN "
                          "mode exists on Atlas A2/A3, not on the training series' 910)"
                          % (other, MODES.index(other))) if worse else
             ("the %s mode skips more: keep %s when moving between devices (Atlas A2/A3 "
              "default to INF/NaN) by calling set_device_sat_mode(%d)"
              % (other, effective, MODES.index(effective))),
             _call(front_end, other if worse else effective), applies=worse))


def _fp32_to_fp16(precision_mode, float32_script):
    applied = ("this run applied it" if precision_mode == "allow_fp32_to_fp16"
               else "this run applied no precision_mode (float32 as written)")
    evidence = ("the device's default precision_mode, allow_fp32_to_fp16, runs float32 matmuls, "
                "convolutions and their gradients in float16 (the 910's cube unit has no "
                "float32); %s" % applied)
    if float32_script is None:
        evidence += "; the script's dtype was not determined: this holds for its float32 parts"
    return _finding(
        "fp32-to-fp16", "fp32_to_fp16", "info",
        "on the device a float32 script's matmuls run in float16", evidence,
        _fix("code_edit", "on the device these ops can overflow float16 as a mixed-precision "
             "model's do: keep a loss-scale optimizer around the optimizer, and run the doctor "
             "with --precision-mode allow_fp32_to_fp16 to see those overflows on the CPU (a "
             "float32 run has none). precision_mode must_keep_origin_dtype keeps float32 only "
             "where the cube unit computes it (not on the 910)"))
