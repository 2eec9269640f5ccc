"""The doctor's configuration and mode findings (npu_loss_scale/tools/doctor/config_findings.py,
mode_findings.py): known answers counted by hand in each test, one scaler kind after another,
then each source of the saturation mode and the two runs side by side."""
import pytest

from npu_loss_scale.tools.doctor.config_findings import config_findings
from npu_loss_scale.tools.doctor.mode_findings import effective_mode, mode_findings

pure = pytest.mark.tf_independent   # pure Python: no TensorFlow in the code under test


def run_of(scales, skipped, max_safe=None):
    """Step dicts from the scales each step used and its verdict (the next scale is the next
    step's; the last one repeats)."""
    steps = []
    for i, (scale, skip) in enumerate(zip(scales, skipped)):
        nxt = scales[i + 1] if i + 1 < len(scales) else scale
        step = {"step": i + 1, "loss_scale": scale, "next_loss_scale": nxt, "skipped": skip}
        if max_safe is not None:
            step["max_safe_scale"] = max_safe
        steps.append(step)
    return steps


def only(findings, kind):
    found = [f for f in findings if f["kind"] == kind]
    assert len(found) == 1, findings
    return found[0]


def ascend(**settings):
    return {"kind": "ascend_exponential",
            "settings": dict({"incr_every_n_steps": 1000}, **settings)}


# -- wasted_start ------------------------------------------------------------------------------
@pure
def test_2_32_halving_every_overflow_wastes_exactly_17_steps():
    # 2**32 halves once per overflowed step; 2**32 / 2**17 = 2**15, the largest safe scale: the
    # scales 2**32 ... 2**16 (17 of them) overflow, step 18 at 2**15 is applied.
    scales = [2.0 ** (32 - i) for i in range(18)] + [2.0 ** 15, 2.0 ** 15]
    steps = run_of(scales, [True] * 17 + [False] * 3, max_safe=2.0 ** 15)
    findings = config_findings(
        ascend(init_loss_scale=2.0 ** 32, decr_every_n_nan_or_inf=1, decr_ratio=0.5), steps,
        run="saturation")
    wasted = only(findings, "wasted_start")
    assert wasted["id"] == "wasted-start/saturation"
    assert wasted["severity"] == "warning"
    assert wasted["numbers"]["wasted_steps"] == [17, 17]
    assert "exactly 17 steps" in wasted["title"]
    assert wasted["fix"]["kind"] == "manager_setting"
    assert wasted["fix"]["settings"] == {"init_loss_scale": 32768.0}
    assert wasted["verified"] is None
    assert [f["kind"] for f in findings] == ["wasted_start"]


@pure
def test_the_17_steps_are_predicted_from_the_gradients_before_the_run_gets_there():
    # Only 5 steps ran, all skipped: the count comes from the rule and the bound alone.
    steps = run_of([2.0 ** (32 - i) for i in range(5)], [True] * 5, max_safe=2.0 ** 15)
    wasted = only(config_findings(
        ascend(init_loss_scale=2.0 ** 32, decr_every_n_nan_or_inf=1, decr_ratio=0.5), steps),
        "wasted_start")
    assert wasted["numbers"]["wasted_steps"] == [17, 17]
    assert wasted["id"] == "wasted-start"


@pure
def test_2_32_with_decr_ratio_0_8_wastes_100_to_106_steps():
    # decr_every_n_nan_or_inf=2 (the default): every 2 overflowed steps multiply the scale by 0.8.
    # Largest safe scale 2**15: 2**15 * g < 65520 <= 2**16 * g. A scale S <= 2**15 is surely
    # applied, one >= 2**16 surely skipped, one between depends on g. 2**32 * 0.8**k:
    #   k = 49: 76612 >= 2**16     k = 50: 61290 < 2**16   (the first that may fit)
    #   k = 52: 39225 > 2**15      k = 53: 31380 <= 2**15  (the first that surely fits)
    # so 2 * 50 = 100 to 2 * 53 = 106 steps are skipped first.
    assert 2.0 ** 32 * 0.8 ** 49 >= 2 ** 16 > 2.0 ** 32 * 0.8 ** 50
    assert 2.0 ** 32 * 0.8 ** 52 > 2 ** 15 >= 2.0 ** 32 * 0.8 ** 53
    steps = run_of([2.0 ** 32] * 20, [True] * 20, max_safe=2.0 ** 15)
    wasted = only(config_findings(ascend(init_loss_scale=2.0 ** 32), steps), "wasted_start")
    assert wasted["numbers"]["wasted_steps"] == [100, 106]
    assert "100 to 106" in wasted["title"]
    assert wasted["fix"]["settings"] == {"init_loss_scale": 32768.0}


@pure
def test_a_run_that_reaches_the_first_applied_step_settles_the_range():
    # The same start, observed up to its first applied step, the 103rd: 102 wasted (in 100..106).
    steps = run_of([1.0] * 103, [True] * 102 + [False], max_safe=2.0 ** 15)
    wasted = only(config_findings(ascend(init_loss_scale=2.0 ** 32), steps), "wasted_start")
    assert wasted["numbers"]["wasted_steps"] == [102, 102]


@pure
def test_a_run_applied_sooner_than_its_later_gradients_allow_counts_its_own_start():
    # 2**32 halving per overflow; the run's first applied step comes at 2**21 (11 skipped:
    # 2**32 ... 2**22), its gradients growing later to a largest safe scale of 2**18, by which
    # the rule would skip 2**32 ... 2**19, 14 steps: the run wasted 11, the 14 is what a start
    # from today's gradients would waste.
    scales = [2.0 ** (32 - i) for i in range(12)] + [2.0 ** 21] * 4
    steps = run_of(scales, [True] * 11 + [False] * 5)
    for step in steps:
        step["max_safe_scale"] = 0.0 if step["skipped"] else 2.0 ** 21
    steps[-1]["max_safe_scale"] = 2.0 ** 18
    wasted = only(config_findings(
        ascend(init_loss_scale=2.0 ** 32, decr_every_n_nan_or_inf=1, decr_ratio=0.5), steps),
        "wasted_start")
    assert wasted["numbers"]["wasted_steps"] == [11, 11]
    assert "exactly 11 steps" in wasted["title"]
    assert "skips exactly 14 steps" in wasted["evidence"]
    assert wasted["fix"]["settings"] == {"init_loss_scale": 2.0 ** 18}


@pure
def test_without_gradients_the_run_s_own_leading_skips_count():
    # No max_safe_scale: 3 skipped steps, then applied at 2**13: 3 wasted, a few: info.
    steps = run_of([2.0 ** 16, 2.0 ** 15, 2.0 ** 14, 2.0 ** 13], [True, True, True, False])
    wasted = only(config_findings(
        {"kind": "grad_scaler", "settings": {}}, steps), "wasted_start")
    assert wasted["severity"] == "info"
    assert wasted["numbers"]["wasted_steps"] == [3, 3]
    assert wasted["fix"]["settings"] == {"init_scale": 8192.0}


@pure
def test_megatron_hysteresis_2_wastes_5_steps():
    # 2**20, hysteresis 2, bound 2**16: step 1 spends the hysteresis (2 -> 1, scale kept), step 2
    # backs off to 2**19, steps 3, 4, 5 to 2**18, 2**17, 2**16; step 6 at 2**16 is applied.
    scaler = {"kind": "megatron_dynamic", "settings": {
        "initial_scale": 2.0 ** 20, "min_scale": 1.0, "growth_factor": 2.0,
        "backoff_factor": 0.5, "growth_interval": 1000, "hysteresis": 2}}
    steps = run_of([2.0 ** 20] * 3, [True] * 3, max_safe=2.0 ** 16)
    wasted = only(config_findings(scaler, steps), "wasted_start")
    assert wasted["numbers"]["wasted_steps"] == [5, 5]
    assert wasted["severity"] == "warning"
    assert wasted["fix"]["settings"] == {"initial_scale": 65536.0}


@pure
def test_grad_scaler_defaults_waste_6_steps_above_a_bound_of_2_10():
    # GradScaler's default init_scale 2**16 halves 6 times to 2**10.
    steps = run_of([2.0 ** 16], [True], max_safe=2.0 ** 10)
    wasted = only(config_findings({"kind": "grad_scaler", "settings": {}}, steps),
                  "wasted_start")
    assert wasted["numbers"]["wasted_steps"] == [6, 6]
    assert wasted["fix"]["settings"] == {"init_scale": 1024.0}


@pure
def test_keras_default_scale_wastes_2_steps_above_a_bound_of_2_13():
    # Keras's default initial_scale 2**15 halves twice to 2**13: 2 steps, a few: info.
    steps = run_of([2.0 ** 15], [True], max_safe=2.0 ** 13)
    wasted = only(config_findings({"kind": "keras", "settings": {"initial_scale": None}}, steps),
                  "wasted_start")
    assert wasted["numbers"]["wasted_steps"] == [2, 2]
    assert wasted["severity"] == "info"
    assert wasted["fix"]["settings"] == {"initial_scale": 8192.0}


@pure
def test_a_start_within_the_bound_wastes_nothing():
    steps = run_of([2.0 ** 15] * 4, [False] * 4, max_safe=2.0 ** 15)
    assert config_findings(ascend(init_loss_scale=2.0 ** 15), steps) == []


@pure
def test_skips_the_scale_does_not_explain_are_not_blamed_on_the_start():
    # A benign overflow skips every step at a scale the gradients allow: no wasted start.
    steps = run_of([2.0 ** 15] * 4, [True, True, False, False], max_safe=2.0 ** 15)
    findings = config_findings(ascend(init_loss_scale=2.0 ** 15, decr_every_n_nan_or_inf=5),
                               steps)
    assert [f["kind"] for f in findings] == []


# -- scale_cannot_grow -------------------------------------------------------------------------
@pure
def test_a_scale_that_cannot_grow_within_the_run():
    # GradScaler(init_scale=1, growth_interval=20): 45 steps at 1, one skipped every 15th, the
    # gradients allow 2**15; one growth needs 20 applied steps in a row, the longest is 14.
    scaler = {"kind": "grad_scaler", "settings": {"init_scale": 1.0, "growth_interval": 20,
                                                  "backoff_factor": 1.0}}
    skipped = ([False] * 14 + [True]) * 3
    steps = run_of([1.0] * 45, skipped, max_safe=2.0 ** 15)
    finding = only(config_findings(scaler, steps), "scale_cannot_grow")
    assert finding["severity"] == "warning"
    assert finding["numbers"]["growth_interval"] == 20
    assert finding["numbers"]["longest_applied_stretch"] == 14
    assert finding["fix"]["settings"] == {"init_scale": 32768.0}
    assert "20" in finding["evidence"]


@pure
def test_a_run_shorter_than_the_growth_interval_says_nothing_of_growth():
    # GradScaler(init_scale=1, growth_interval=2000): the doctor's 20 applied steps at 1 cannot
    # show whether 2000 in a row ever come; the gradients allowing 2**15 is not enough.
    scaler = {"kind": "grad_scaler", "settings": {"init_scale": 1.0, "growth_interval": 2000}}
    steps = run_of([1.0] * 20, [False] * 20, max_safe=2.0 ** 15)
    assert [f["kind"] for f in config_findings(scaler, steps)] == []


@pure
def test_a_scale_that_grows_within_the_run_is_no_finding():
    # growth_interval 5: doubled after steps 5 and 10.
    scaler = {"kind": "grad_scaler", "settings": {"init_scale": 1.0, "growth_interval": 5}}
    steps = run_of([1.0] * 5 + [2.0] * 5 + [4.0] * 2, [False] * 12, max_safe=2.0 ** 15)
    assert config_findings(scaler, steps) == []


@pure
def test_skips_that_break_every_stretch_keep_the_scale_from_growing():
    # incr_every_n_steps=4 is shorter than the run, but an overflow every 3rd step resets
    # the count: stretches of 2 applied steps at most. 8 = 2**3 against a bound of 2**10.
    steps = run_of([8.0] * 9, [False, False, True] * 3, max_safe=2.0 ** 10)
    scaler = {"kind": "ascend_exponential", "settings": {
        "init_loss_scale": 8.0, "incr_every_n_steps": 4, "decr_every_n_nan_or_inf": 1000}}
    finding = only(config_findings(scaler, steps), "scale_cannot_grow")
    assert finding["numbers"]["longest_applied_stretch"] == 2
    assert finding["fix"]["settings"] == {"init_loss_scale": 1024.0}


# -- scale_pinned_at_minimum -------------------------------------------------------------------
@pure
def test_an_ascend_scale_pinned_at_1_while_steps_skip_is_an_error():
    # 4 -> 2 -> 1, then 1 again and again: Ascend's floor is 1; 3 skipped steps at it.
    steps = run_of([4.0, 2.0, 1.0, 1.0, 1.0], [True] * 5)
    scaler = ascend(init_loss_scale=4.0, decr_every_n_nan_or_inf=1, decr_ratio=0.5)
    findings = config_findings(scaler, steps)
    pinned = only(findings, "scale_pinned_at_minimum")
    assert pinned["severity"] == "error"
    assert pinned["numbers"]["skipped_at_minimum"] == 3
    assert pinned["fix"]["kind"] == "code_edit"      # no setting of the scale removes these
    assert pinned["fix"]["settings"] is None
    assert "steps 3, 4, 5" in pinned["evidence"]
    assert [f["kind"] for f in findings] == ["scale_pinned_at_minimum"]


@pure
def test_a_megatron_min_scale_above_the_gradients_bound_is_pinned():
    # min_scale 2**10 and a bound of 2**8: the scale can never get low enough.
    scaler = {"kind": "megatron_dynamic", "settings": {
        "initial_scale": 2.0 ** 12, "min_scale": 2.0 ** 10, "growth_factor": 2.0,
        "backoff_factor": 0.5, "growth_interval": 1000, "hysteresis": 1}}
    steps = run_of([2.0 ** 12, 2.0 ** 11, 2.0 ** 10, 2.0 ** 10], [True] * 4, max_safe=2.0 ** 8)
    findings = config_findings(scaler, steps)
    pinned = only(findings, "scale_pinned_at_minimum")
    assert pinned["severity"] == "error"
    assert pinned["fix"]["settings"] == {"min_scale": 256.0}
    assert pinned["numbers"]["skipped_at_minimum"] == 2
    assert [f["kind"] for f in findings] == ["scale_pinned_at_minimum"]


@pure
@pytest.mark.parametrize("kind,name", [("ascend_fixed", "loss_scale"),
                                       ("megatron_constant", "initial_scale")])
def test_a_fixed_scale_above_the_bound_skips_every_step(kind, name):
    steps = run_of([2.0 ** 16] * 3, [True] * 3, max_safe=2.0 ** 12)
    pinned = only(config_findings({"kind": kind, "settings": {name: 2.0 ** 16}}, steps),
                  "scale_pinned_at_minimum")
    assert pinned["fix"]["settings"] == {name: 4096.0}
    assert pinned["numbers"]["skipped_at_minimum"] == 3


@pure
def test_a_fixed_scale_skipping_without_a_bound_asks_for_the_advisor():
    # FixedLossScaleManager(2**16), every step skipped, no gradients observed: a lower scale may
    # help, and only an observation can say which.
    steps = run_of([2.0 ** 16] * 3, [True] * 3)
    pinned = only(config_findings({"kind": "ascend_fixed", "settings": {"loss_scale": 2.0 ** 16}},
                                  steps), "scale_pinned_at_minimum")
    assert pinned["fix"]["settings"] is None
    assert "--advise) and set loss_scale to it" in pinned["fix"]["description"]


@pure
def test_a_keras_fixed_scale_within_the_bound_is_not_pinned():
    # dynamic=False at 2**12 with a bound of 2**15: the skips are not the scale's.
    scaler = {"kind": "keras", "settings": {"dynamic": False, "initial_scale": 2.0 ** 12,
                                            "dynamic_growth_steps": None}}
    steps = run_of([2.0 ** 12] * 3, [True] * 3, max_safe=2.0 ** 15)
    assert config_findings(scaler, steps) == []


# -- what is no finding, and bad input ---------------------------------------------------------
@pure
def test_no_scaler_and_a_disabled_grad_scaler_give_no_findings():
    steps = run_of([1.0] * 3, [True] * 3)
    assert config_findings({"kind": None, "settings": {}}, steps) == []
    assert config_findings({"kind": "grad_scaler", "settings": {"enabled": False}}, steps) == []
    assert config_findings(ascend(init_loss_scale=2.0 ** 20), []) == []


@pure
def test_gradients_no_scale_bounds_blame_no_setting():
    # "inf": no float16 gradient limits the scale; a benign overflow skips the first two steps
    # (without the bound these would count as 2 wasted steps).
    steps = run_of([2.0 ** 20, 2.0 ** 19, 2.0 ** 18], [True, True, False], max_safe="inf")
    assert config_findings({"kind": "keras", "settings": {"initial_scale": 2.0 ** 20}},
                           steps) == []


@pure
@pytest.mark.parametrize("scaler,steps,message", [
    ({"kind": "apex", "settings": {}}, [],
     r"scaler kind must be one of ascend_exponential, .*got 'apex'"),
    ({"kind": "ascend_exponential", "settings": {"init_loss_scale": 8.0}}, [],
     r"lack 'incr_every_n_steps'"),
    (ascend(init_loss_scale="big"), [], r"'init_loss_scale' .*must be a number .*got 'big'"),
    (ascend(init_loss_scale=8.0), [{"step": 1, "loss_scale": 8.0, "skipped": 1}],
     r"'skipped' must be True or False; got 1"),
    (ascend(init_loss_scale=8.0), "steps", r"steps must be a run's list of step dicts"),
])
def test_bad_input_is_refused_naming_it(scaler, steps, message):
    with pytest.raises(ValueError, match=message):
        config_findings(scaler, steps)


# -- effective_mode --------------------------------------------------------------------------
@pure
def test_mode_default_is_saturation():
    mode = effective_mode({}, None, None)
    assert (mode["effective"], mode["source"]) == ("saturation", "default")


@pure
@pytest.mark.parametrize("value,expected", [("inf_nan", "inf_nan"), (" 1 ", "inf_nan"),
                                            ("SATURATION", "saturation"), ("0", "saturation")])
def test_mode_from_the_environment(value, expected):
    mode = effective_mode({"NPU_LOSS_SCALE_SAT_MODE": value}, None, None)
    assert (mode["effective"], mode["source"]) == (expected, "environment")
    assert mode["source_detail"] == "NPU_LOSS_SCALE_SAT_MODE=%s" % value


@pure
def test_mode_option_over_the_environment():
    mode = effective_mode({"NPU_LOSS_SCALE_SAT_MODE": "saturation"}, 1, None)
    assert (mode["effective"], mode["source"]) == ("inf_nan", "option")
    assert "--sat-mode inf_nan" in mode["source_detail"]


@pure
def test_mode_script_call_over_option_and_environment():
    mode = effective_mode({"NPU_LOSS_SCALE_SAT_MODE": "1"}, 1, 0)
    assert (mode["effective"], mode["source"]) == ("saturation", "script")
    assert mode["source_detail"] == ("set_device_sat_mode(0) in the script, over --sat-mode "
                                     "inf_nan and NPU_LOSS_SCALE_SAT_MODE=1")
    mode = effective_mode({}, None, 1, call_site="train.py line 12")
    assert (mode["effective"], mode["source"]) == ("inf_nan", "script")
    assert mode["source_detail"] == "set_device_sat_mode(1) in train.py line 12"


@pure
def test_ascend_s_own_variables_are_reported_as_not_honoured():
    mode = effective_mode({"INF_NAN_MODE_ENABLE": "1"}, None, None)
    assert (mode["effective"], mode["source"]) == ("saturation", "default")
    assert "INF_NAN_MODE_ENABLE=1" in mode["source_detail"]
    assert "does not honour" in mode["source_detail"]
    source = only(mode_findings(mode, {}, None, "allow_mix_precision"), "mode_source")
    assert source["severity"] == "warning"     # Ascend's runtime would run INF/NaN mode
    forced = effective_mode({"INF_NAN_MODE_FORCE_DISABLE": "1"}, None, None)
    assert only(mode_findings(forced, {}, None, "allow_mix_precision"),
                "mode_source")["severity"] == "info"


@pure
@pytest.mark.parametrize("environ,option,call,message", [
    ({"NPU_LOSS_SCALE_SAT_MODE": "2"}, None, None,
     r"environment variable NPU_LOSS_SCALE_SAT_MODE must be 0 or saturation, 1 or inf_nan; "
     r"got '2'"),
    ({}, "half", None, r"option must be 0 or saturation, 1 or inf_nan; got 'half'"),
    ({}, None, True, r"script_call must be 0 or 1 .*got True"),
])
def test_a_bad_mode_is_refused_naming_it(environ, option, call, message):
    with pytest.raises(ValueError, match=message):
        effective_mode(environ, option, call)


def test_effective_mode_reads_the_variable_as_the_emulation_does(monkeypatch):
    """The emulation's own reading of NPU_LOSS_SCALE_SAT_MODE (device/register.py) and
    effective_mode agree, accepted values and refusals alike."""
    from npu_loss_scale.device import register  # pylint: disable=import-outside-toplevel
    for value in ("inf_nan", "INF_NAN", " 1", "0", "saturation", "", "2", "on"):
        monkeypatch.setenv("NPU_LOSS_SCALE_SAT_MODE", value)
        try:
            # pylint: disable-next=protected-access
            emulation = ("saturation", "inf_nan")[register._initial_mode()]
        except ValueError:
            emulation = ValueError
        try:
            ours = effective_mode({"NPU_LOSS_SCALE_SAT_MODE": value})["effective"]
        except ValueError:
            ours = ValueError
        assert ours == emulation, value


# -- mode_findings ---------------------------------------------------------------------------
def two_runs(saturation, inf_nan, front_end, option=None):
    """The mode findings of a default (or ``option``) mode with the two runs' skip patterns
    ("S" skipped, "." applied), a mixed-precision script."""
    runs = {name: {"steps": [{"step": i + 1, "loss_scale": 1.0, "next_loss_scale": 1.0,
                              "skipped": c == "S"} for i, c in enumerate(pattern)]}
            for name, pattern in (("saturation", saturation), ("inf_nan", inf_nan))}
    return mode_findings(effective_mode({}, option, None), runs, front_end, "allow_mix_precision")


@pure
def test_a_run_stopped_early_is_compared_over_the_steps_both_made():
    # the inf_nan run stopped after 2 steps: its 2 against the saturation run's first 2
    findings = two_runs("SS.S", "S.", "NPULossScaleOptimizer")
    difference = only(findings, "mode_difference")
    assert "saturation SS  (2 of 2)" in difference["evidence"]
    assert "inf_nan    S.  (1 of 2)" in difference["evidence"]
    assert "the first 2 steps" in difference["evidence"]
    # the same first steps, or a run with none, are no difference
    assert not [f for f in two_runs("S.SS", "S.", "NPULossScaleOptimizer")
                if f["kind"] == "mode_difference"]
    assert not [f for f in two_runs("SSSS", "", "NPULossScaleOptimizer")
                if f["kind"] == "mode_difference"]


@pure
def test_the_two_runs_side_by_side_when_they_differ():
    findings = two_runs("SSSS", "S...", "NPULossScaleOptimizer")
    difference = only(findings, "mode_difference")
    assert difference["severity"] == "warning"       # the effective mode skips more
    assert "saturation SSSS  (4 of 4)" in difference["evidence"]
    assert "inf_nan    S...  (1 of 4)" in difference["evidence"]
    assert "global_step unchanged" in difference["evidence"]
    assert difference["fix"]["kind"] == "sat_mode"
    assert difference["fix"]["code"].startswith("npu_plugin.set_device_sat_mode(1)")
    assert [f["kind"] for f in findings] == ["mode_source", "mode_difference"]


@pure
def test_inf_nan_mode_on_tf1_names_the_ignored_is_distributed():
    difference = only(two_runs("S..", "SSS", "NPULossScaleOptimizer", option="inf_nan"),
                      "mode_difference")
    assert "is_distributed is ignored" in difference["evidence"]
    assert difference["fix"]["code"].startswith("npu_plugin.set_device_sat_mode(0)")


@pure
def test_keras_gets_the_tf2_adapter_s_call_and_iterations():
    difference = only(two_runs("..", "S.", "NpuLossScaleOptimizer (Keras)"), "mode_difference")
    assert difference["severity"] == "info"           # the other mode skips more
    assert "advances iterations" in difference["evidence"]
    assert difference["fix"]["code"].startswith("npu_device.set_device_sat_mode(0)")


@pure
def test_the_same_skips_in_both_modes_are_no_difference():
    findings = two_runs("S.", "S.", "NPULossScaleOptimizer")
    assert [f["kind"] for f in findings] == ["mode_source"]
    assert "global_step unchanged" in findings[0]["evidence"]   # the adapter's notes stay here


@pure
@pytest.mark.parametrize("precision_mode,float32_script,expected", [
    (None, True, True), (None, None, True), ("allow_fp32_to_fp16", True, True),
    ("allow_mix_precision", True, False), (None, False, False)])
def test_fp32_to_fp16(precision_mode, float32_script, expected):
    findings = mode_findings(effective_mode({}, None, None), {}, None, precision_mode,
                             float32_script=float32_script)
    assert ("fp32_to_fp16" in [f["kind"] for f in findings]) is expected


def test_the_settings_defaults_are_the_classes_own():
    """The doctor's table of settings (tools/doctor/scalers.py) holds each class's constructor
    defaults: read here from the classes' signatures, and Keras's from its argument check."""
    import inspect  # pylint: disable=import-outside-toplevel
    import npu_loss_scale as nls  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.tools.doctor import scalers  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.frontends import _keras_shared  # pylint: disable=import-outside-toplevel
    classes = {"ascend_exponential": nls.ExponentialUpdateLossScaleManager,
               "ascend_fixed": nls.FixedLossScaleManager,
               "megatron_dynamic": nls.DynamicGradScaler,
               "megatron_constant": nls.ConstantGradScaler,
               "grad_scaler": nls.GradScaler}
    for kind, cls in classes.items():
        name, table = scalers.KINDS[kind][:2]
        assert cls.__name__ == name
        signature = inspect.signature(cls.__init__).parameters
        for setting, default in table.items():
            declared = signature[setting].default
            if declared is inspect.Parameter.empty:
                # pylint: disable-next=protected-access
                assert default is scalers._REQUIRED, (kind, setting)
            else:
                assert default == declared, (kind, setting)
    assert _keras_shared.check_args(True, None, None) == (scalers.KERAS_INITIAL_SCALE,
                                                          scalers.KERAS_GROWTH_STEPS)


@pure
def test_every_finding_has_the_report_s_shape():
    """Findings of each kind carry the schema's keys (version 1), its kinds, severities and fix
    kinds, a non-null fix and no verification yet; ids unique within one call."""
    keys = {"id", "kind", "severity", "title", "evidence", "site", "fix", "verified"}
    fix_keys = {"kind", "description", "applies_without_edit", "modify_mixlist", "settings",
                "code"}
    megatron = {"kind": "megatron_dynamic", "settings": {
        "initial_scale": 2.0 ** 12, "min_scale": 2.0 ** 10, "growth_factor": 2.0,
        "backoff_factor": 0.5, "growth_interval": 1000, "hysteresis": 1}}
    batches = [
        config_findings(ascend(init_loss_scale=2.0 ** 32, decr_ratio=0.5),
                        run_of([2.0 ** 32] * 3, [True] * 3, max_safe=2.0 ** 15)),
        config_findings({"kind": "grad_scaler", "settings": {"init_scale": 1.0,
                                                             "growth_interval": 3}},
                        run_of([1.0] * 4, [False, False, True, False], max_safe=2.0 ** 15)),
        config_findings(megatron, run_of([2.0 ** 10] * 2, [True] * 2, max_safe=2.0 ** 8)),
        config_findings(ascend(init_loss_scale=1.0), run_of([1.0] * 2, [True] * 2)),
        two_runs("SS", "..", "NPULossScaleOptimizer"),
        mode_findings(effective_mode({}), {}, None, None),
    ]
    kinds = set()
    for findings in batches:
        assert len({f["id"] for f in findings}) == len(findings)
        for finding in findings:
            assert set(finding) - {"numbers"} == keys
            assert finding["severity"] in ("error", "warning", "info")
            assert finding["verified"] is None and finding["site"] is None
            assert set(finding["fix"]) == fix_keys
            assert finding["fix"]["kind"] in ("manager_setting", "sat_mode", "code_edit")
            assert isinstance(finding["evidence"], str) and finding["title"]
            kinds.add(finding["kind"])
    assert kinds == {"wasted_start", "scale_cannot_grow", "scale_pinned_at_minimum",
                     "mode_source", "mode_difference", "fp32_to_fp16"}
