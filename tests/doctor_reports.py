"""Doctor reports (schema ``npu-loss-scale/doctor-report``, version 1) written by hand for the
page's tests (test_doctor_html.py, test_doctor_browser.py): each a known case, with its numbers
worked out here, in the comments, rather than taken from any code of the package.

Each builder returns a fresh dict; ``EXPECTED[name]`` says what the page must show for it: the
plots by id, the finding ids, and the markers each plot must carry.
"""
import copy

SCHEMA = "npu-loss-scale/doctor-report"
MIXLIST_EXP = {"black-list": {"to-add": ["Exp"]}}
KEEP_DTYPE_EDIT = ("-    accuracy = tf.reduce_mean(tf.exp(-loss))\n"
                   "+    with npu_scope.keep_dtype_scope():\n"
                   "+        accuracy = tf.reduce_mean(tf.exp(-loss))\n")


def _header(**fields):
    report = {
        "schema": SCHEMA, "schema_version": 1, "package_version": "0.2.0",
        "created": "2026-12-07T02:00:00Z",
        "command": ["npu-loss-scale", "doctor", "--steps", "4", "train.py", "--lr=0.1"],
        "script": "train.py",
        "stack": {"tensorflow": "2.15.1", "python": "3.11.7", "keras": None},
        "front_end": "NPULossScaleOptimizer", "outcome": "step_limit",
        "outcome_detail": "stopped after the 4 steps asked for", "steps_requested": 4,
        "mode": {"effective": "saturation", "source": "default", "source_detail": None,
                 "precision_mode": "allow_mix_precision", "saturate_every_op": True},
        "scaler": {"kind": "ascend_exponential",
                   "settings": {"init_loss_scale": 65536.0, "incr_every_n_steps": 1000,
                                "decr_every_n_nan_or_inf": 1, "decr_ratio": 0.5}},
        "runs": {}, "sites": [], "findings": [],
    }
    report.update(fields)
    return report


def _run(scales, skipped, losses, sites):
    steps = [{"step": i + 1, "loss_scale": scale, "next_loss_scale": None, "skipped": skip,
              "loss": loss, "sites": list(names)}
             for i, (scale, skip, loss, names) in enumerate(zip(scales, skipped, losses, sites))]
    return {"outcome": "step_limit", "steps": steps, "skipped_steps": sum(skipped),
            "applied_steps": len(skipped) - sum(skipped)}


def metric_overflow():
    """A float16 Exp computed only for a logged metric overflows at every step, in both modes:
    benign (no path to a gradient), yet the register is set and all 4 steps are skipped; the
    scale halves from 2**16 at each (65536, 32768, 16384, 8192). The fix keeps Exp in float32;
    re-run, no step is skipped (4 -> 0) and the scale stays 65536."""
    scales = [65536.0, 32768.0, 16384.0, 8192.0]
    run = _run(scales, [True] * 4, [0.69, 0.69, 0.69, 0.69], [["metric/Exp"]] * 4)
    benign = {"verdict": "benign", "method": "reachability",
              "evidence": "no path from metric/Exp to any applied gradient"}
    return _header(
        runs={"saturation": run, "inf_nan": copy.deepcopy(run)},
        sites=[{"op_name": "metric/Exp", "op_type": "Exp", "layer": "metric",
                "direction": "forward", "dtype": "float16", "max_magnitude": "inf",
                "steps": {"saturation": [1, 2, 3, 4], "inf_nan": [1, 2, 3, 4]},
                "verdict": {"saturation": dict(benign), "inf_nan": dict(benign)}}],
        findings=[{
            "id": "benign-overflow/metric/Exp", "kind": "benign_overflow", "severity": "warning",
            "title": "A metric's float16 Exp overflows at every step and skips it",
            "evidence": "metric/Exp overflowed at 4 of 4 steps; it reaches no applied gradient",
            "site": "metric/Exp",
            "fix": {"kind": "keep_fp32", "description": "Keep Exp in float32.",
                    "applies_without_edit": True, "modify_mixlist": MIXLIST_EXP,
                    "settings": None, "code": KEEP_DTYPE_EDIT},
            "verified": {"runs_compared": "saturation", "steps": 4, "skipped_before": 4,
                         "skipped_after": 0, "loss_before": [0.69, 0.69, 0.69, 0.69],
                         "loss_after": [0.69, 0.61, 0.55, 0.50],
                         "loss_scale_before": scales, "loss_scale_after": [65536.0] * 4}}])


def masked_padding():
    """A float16 Log over zero padding, masked by a tf.where after the Log: 3 steps, every one
    skipped in both modes (scales 65536, 32768, 16384). Benign in saturation mode (decided by
    replay), harmful in INF/NaN mode (the masked branch's gradient is 0 * inf = NaN). In INF/NaN
    mode the backward MatMul also overflows at step 1 (another layer: dense)."""
    scales = [65536.0, 32768.0, 16384.0]
    saturation = _run(scales, [True] * 3, [1.2, None, None], [["pad/Log"]] * 3)
    inf_nan = _run(scales, [True] * 3, [None, None, None],
                   [["pad/Log", "dense/grad/MatMul"], ["pad/Log"], ["pad/Log"]])
    inf_nan["outcome"] = "step_limit"
    return _header(
        command=["npu-loss-scale", "doctor", "--steps", "3", "pad.py"], script="pad.py",
        steps_requested=3, runs={"saturation": saturation, "inf_nan": inf_nan},
        sites=[{"op_name": "pad/Log", "op_type": "Log", "layer": "pad", "direction": "forward",
                "dtype": "float16", "max_magnitude": "-inf",
                "steps": {"saturation": [1, 2, 3], "inf_nan": [1, 2, 3]},
                "verdict": {
                    "saturation": {"verdict": "benign", "method": "replay",
                                   "evidence": "gradients equal with pad/Log kept finite"},
                    "inf_nan": {"verdict": "harmful", "method": "reachability+replay",
                                "evidence": "the masked branch's gradient is 0 * inf = NaN"}}},
               {"op_name": "dense/grad/MatMul", "op_type": "MatMul", "layer": "dense",
                "direction": "backward", "dtype": "float16", "max_magnitude": 131072.0,
                "steps": {"inf_nan": [1]},
                "verdict": {"inf_nan": {"verdict": "harmful", "method": "reachability",
                                        "evidence": "it is the gradient of dense/kernel"}}}],
        findings=[
            {"id": "mode-difference/pad/Log", "kind": "mode_difference", "severity": "info",
             "title": "pad/Log is benign in saturation mode, harmful in INF/NaN mode",
             "evidence": "the same 3 steps skipped in both modes", "site": "pad/Log",
             "fix": {"kind": "sat_mode", "description": "Run in saturation mode, the default.",
                     "applies_without_edit": True, "modify_mixlist": None, "settings": None,
                     "code": None},
             "verified": None},
            {"id": "harmful-overflow/pad/Log", "kind": "harmful_overflow", "severity": "error",
             "title": "Masked padding feeds a float16 Log", "site": "pad/Log",
             "evidence": "pad/Log is -inf at 3 of 3 steps in INF/NaN mode",
             "fix": {"kind": "code_edit", "description": "Mask before the Log, not after.",
                     "applies_without_edit": False, "modify_mixlist": None, "settings": None,
                     "code": "-    y = tf.where(mask, tf.math.log(x), 0.0)\n"
                             "+    y = tf.math.log(tf.where(mask, x, 1.0))\n"},
             "verified": None}])


def wasted_start():
    """An initial scale of 2**20 with decr_ratio 0.5 on a model whose float16 gradients overflow
    above 2**15: steps 1-5 skipped (2**20, 2**19, 2**18, 2**17, 2**16), steps 6-8 applied at
    2**15. Saturation mode only (the other mode was not run). The fix starts at 2**15: 5 -> 0."""
    scales = [2.0 ** 20, 2.0 ** 19, 2.0 ** 18, 2.0 ** 17, 2.0 ** 16, 2.0 ** 15, 2.0 ** 15,
              2.0 ** 15]
    skipped = [True] * 5 + [False] * 3
    run = _run(scales, skipped, [2.3] * 5 + [2.1, 1.9, 1.8],
               [["dense/grad/MatMul"]] * 5 + [[]] * 3)
    return _header(
        command=["npu-loss-scale", "doctor", "--steps", "8", "--mode", "saturation", "bert.py"],
        script="bert.py", steps_requested=8, runs={"saturation": run},
        mode={"effective": "saturation", "source": "option",
              "source_detail": "npu-loss-scale doctor --mode saturation",
              "precision_mode": None, "saturate_every_op": True},
        scaler={"kind": "ascend_exponential",
                "settings": {"init_loss_scale": 1048576.0, "decr_ratio": 0.5}},
        sites=[{"op_name": "dense/grad/MatMul", "op_type": "MatMul", "layer": "dense",
                "direction": "backward", "dtype": "float16", "max_magnitude": "inf",
                "steps": {"saturation": [1, 2, 3, 4, 5]},
                "verdict": {"saturation": {"verdict": "harmful", "method": "reachability",
                                           "evidence": "it is the gradient of dense/kernel"}}}],
        findings=[{
            "id": "wasted-start", "kind": "wasted_start", "severity": "warning",
            "title": "The initial loss scale wastes the first 5 steps",
            "evidence": "5 steps skipped before the first applied one (step 6, at 2**15)",
            "site": None,
            "fix": {"kind": "manager_setting", "description": "Start at 2**15.",
                    "applies_without_edit": True, "modify_mixlist": None,
                    "settings": {"init_loss_scale": 32768.0}, "code": None},
            "verified": {"runs_compared": "saturation", "steps": 8, "skipped_before": 5,
                         "skipped_after": 0, "loss_before": [2.3] * 5 + [2.1, 1.9, 1.8],
                         "loss_after": [2.3, 2.1, 1.9, 1.8, 1.7, 1.6, 1.5, None],
                         "loss_scale_before": scales, "loss_scale_after": [32768.0] * 8}}])


def crashed():
    """The script raised before its first step: no run has a step, no site, no finding."""
    return _header(
        outcome="crashed", front_end=None, scaler={"kind": None, "settings": {}},
        outcome_detail=("Traceback (most recent call last):\n  File \"train.py\", line 12\n"
                        "ValueError: Shapes (None, 10) and (None, 5) are incompatible"),
        runs={"saturation": {"outcome": "crashed", "steps": [], "skipped_steps": 0,
                             "applied_steps": 0}})


def no_loss_scale_optimizer():
    """The script trained without any loss-scale optimizer: nothing to run twice or to fix."""
    return _header(outcome="no_loss_scale_optimizer", front_end=None,
                   outcome_detail="no loss-scale optimizer was built in 4 steps",
                   scaler={"kind": None, "settings": None}, runs={})


def clean():
    """INF/NaN mode only (set by the environment), 3 steps all applied at 2**15, no overflow:
    the one finding says so."""
    run = _run([32768.0] * 3, [False] * 3, [0.9, 0.8, 0.7], [[], [], []])
    return _header(
        runs={"inf_nan": run}, steps_requested=3, outcome="completed", outcome_detail=None,
        mode={"effective": "inf_nan", "source": "environment",
              "source_detail": "NPU_LOSS_SCALE_SAT_MODE=inf_nan", "precision_mode": None,
              "saturate_every_op": False},
        findings=[{"id": "clean", "kind": "clean", "severity": "info",
                   "title": "No overflow in 3 steps", "evidence": "3 of 3 steps applied",
                   "site": None, "fix": None, "verified": None}])


def sparse():
    """Only the required keys, numbers written as the strings "inf"/"nan", keys the page does not
    know (a later writer's optional ones): 2 steps, the first skipped at an infinite scale."""
    return {"schema": SCHEMA, "schema_version": 1, "outcome": "stopped",
            "a_later_key": {"anything": [1, 2]},
            "runs": {"saturation": {
                "steps": [{"step": 1, "loss_scale": "inf", "skipped": True, "loss": "nan",
                           "new_step_key": 3},
                          {"step": 2, "loss_scale": 1.0, "skipped": False}]}},
            "sites": [{"op_name": "a/b", "max_magnitude": "nan", "unknown": True}],
            "findings": [{"id": "f/1", "severity": "warning", "title": "A finding with no fix",
                          "fix": None, "verified": None, "extra": "ignored"}]}


HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>&amp;"


def hostile():
    """User text with markup in every place a script or an exception can put it."""
    report = metric_overflow()
    report["runs"] = {}  # no plot: the text is the point
    report["findings"][0]["verified"] = None
    report["script"] = HOSTILE
    report["command"] = ["npu-loss-scale", "doctor", HOSTILE]
    report["outcome_detail"] = HOSTILE
    report["sites"][0]["op_name"] = "metric/" + HOSTILE
    report["sites"][0]["verdict"]["saturation"]["evidence"] = HOSTILE
    finding = report["findings"][0]
    finding["id"] = "benign/" + HOSTILE
    finding["title"] = finding["evidence"] = HOSTILE
    finding["fix"]["code"] = HOSTILE
    return report


REPORTS = {"metric_overflow": metric_overflow, "masked_padding": masked_padding,
           "wasted_start": wasted_start, "crashed": crashed,
           "no_loss_scale_optimizer": no_loss_scale_optimizer, "clean": clean, "sparse": sparse,
           "hostile": hostile}

# What each page shows, from the cases above: its plots (the figure ids), its findings in the
# order of the page (errors, then warnings, then infos), and the number of markers a plot's
# groups must hold (skipped and applied steps per mode; grid cells = (layer, step) pairs).
EXPECTED = {
    "metric_overflow": {
        "plots": ["plot-fix-1", "plot-loss-scale", "plot-sites-saturation", "plot-sites-inf_nan"],
        "findings": ["benign-overflow/metric/Exp"],
        "markers": {"plot-loss-scale-skipped-saturation": 4, "plot-loss-scale-applied-saturation": 0,
                    "plot-loss-scale-skipped-inf_nan": 4, "plot-loss-scale-applied-inf_nan": 0,
                    "plot-sites-saturation-cells": 4, "plot-sites-inf_nan-cells": 4}},
    "masked_padding": {
        "plots": ["plot-loss-scale", "plot-sites-saturation", "plot-sites-inf_nan"],
        "findings": ["harmful-overflow/pad/Log", "mode-difference/pad/Log"],
        # INF/NaN: pad at steps 1-3 and dense at step 1
        "markers": {"plot-loss-scale-skipped-saturation": 3, "plot-loss-scale-skipped-inf_nan": 3,
                    "plot-sites-saturation-cells": 3, "plot-sites-inf_nan-cells": 4}},
    "wasted_start": {
        "plots": ["plot-fix-1", "plot-loss-scale", "plot-sites-saturation"],
        "findings": ["wasted-start"],
        "markers": {"plot-loss-scale-skipped-saturation": 5, "plot-loss-scale-applied-saturation": 3,
                    "plot-sites-saturation-cells": 5}},
    "crashed": {"plots": [], "findings": [], "markers": {}},
    "no_loss_scale_optimizer": {"plots": [], "findings": [], "markers": {}},
    "clean": {"plots": ["plot-loss-scale"], "findings": ["clean"],
              "markers": {"plot-loss-scale-applied-inf_nan": 3,
                          "plot-loss-scale-skipped-inf_nan": 0}},
    # step 1's scale is infinite: no marker can stand there
    # (its one site names no step, so there is no grid)
    "sparse": {"plots": ["plot-loss-scale"], "findings": ["f/1"],
               "markers": {"plot-loss-scale-skipped-saturation": 0,
                           "plot-loss-scale-applied-saturation": 1}},
}
