"""npu-loss-scale doctor on its known-answer scripts (tests/scripts/doctor/, and the guide's
examples/doctor/train.py for the metric): the verdicts per
site and mode, the fixes and what their re-runs show, and the reports of scripts that crash,
build no loss-scale optimizer or are stopped.

Every expected number is worked out here from the script, not read from the doctor. Each doctor
run starts one process per overflow mode and per verified fix, so the runs are shared by module
fixtures: 16 processes in all."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from npu_loss_scale.pytest_plugin import assert_no_harmful_overflow, run_doctor
from npu_loss_scale.tools.doctor.summary import summary
from tf_versions import estimator_only, tf2_only

pytestmark = pytest.mark.slow

SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts", "doctor")
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                       "doctor", "train.py")
F16_MAX = 65504.0


def _doctor(factory, name, *args, **options):
    out = factory.mktemp(name)
    return run_doctor(os.path.join(SCRIPTS, name + ".py"), *args, out=str(out), **options)


def _site(report, op_name, direction="forward"):
    found = [s for s in report["sites"] if s["op_name"] == op_name and s["direction"] == direction]
    assert len(found) == 1, [(s["op_name"], s["direction"]) for s in report["sites"]]
    return found[0]


def _finding(report, kind, site=None):
    found = [f for f in report["findings"] if f["kind"] == kind
             and (site is None or f["site"] == site)]
    assert len(found) == 1, [(f["kind"], f["site"]) for f in report["findings"]]
    return found[0]


@pytest.fixture(scope="module")
def metric(tmp_path_factory):
    """The example of the doctor's guide: a float16 exp of a logged metric overflows."""
    return run_doctor(EXAMPLE, out=str(tmp_path_factory.mktemp("metric")), steps=4)


@pytest.fixture(scope="module")
def masked(tmp_path_factory):
    return _doctor(tmp_path_factory, "padding_masked", steps=2, verify=False)


@pytest.fixture(scope="module")
def unmasked(tmp_path_factory):
    return _doctor(tmp_path_factory, "padding_unmasked", steps=2, verify=False,
                   modes="saturation")


@pytest.fixture(scope="module")
def wasted(tmp_path_factory):
    return _doctor(tmp_path_factory, "wasted_start", steps=19, modes="saturation")


def test_a_metric_overflow_is_benign_in_both_modes_and_inf_nan_mode_removes_its_skips(metric):
    site = _site(metric, "metric/Exp")
    for mode in ("saturation", "inf_nan"):
        assert site["verdict"][mode]["verdict"] == "benign"
        assert site["verdict"][mode]["method"] == "reachability"
        # exp(20 * 1.5) = 1.1e13, logged after each step: seen at the next step's read
        assert site["steps"][mode] == [2, 3, 4]
    assert site["max_magnitude"] == "inf"
    # saturation: the sticky register holds the metric's overflow until the next step reads
    # it; INF/NaN: the gradients are finite, nothing skips
    sat, inf_nan = metric["runs"]["saturation"], metric["runs"]["inf_nan"]
    assert [s["skipped"] for s in sat["steps"]] == [False, True, True, True]
    assert [s["loss_scale"] for s in sat["steps"]] == [1024.0, 1024.0, 512.0, 256.0]
    assert [s["skipped"] for s in inf_nan["steps"]] == [False] * 4
    assert [s["loss_scale"] for s in inf_nan["steps"]] == [1024.0] * 4
    finding = _finding(metric, "benign_overflow", "metric/Exp")
    assert finding["fix"]["kind"] == "sat_mode" and finding["fix"]["applies_without_edit"]
    assert finding["verified"]["skipped_before"] == sat["skipped_steps"] == 3
    assert finding["verified"]["skipped_after"] == 0
    assert_no_harmful_overflow(metric)
    # the loss the steps fetched: mean((x @ [0.5, 0.5] - 1)^2) over x = [[1, 2], [3, 4]]
    assert inf_nan["steps"][0]["loss"] == pytest.approx(((1.5 - 1) ** 2 + (3.5 - 1) ** 2) / 2)


def test_padding_masked_after_the_log_is_benign_in_saturation_and_harmful_in_inf_nan(masked):
    log = _site(masked, "padding/Log")
    assert log["verdict"]["saturation"]["verdict"] == "benign"
    assert log["verdict"]["saturation"]["method"] == "reachability+replay"
    assert log["verdict"]["inf_nan"]["verdict"] == "harmful"
    assert_no_harmful_overflow(masked, "saturation")
    with pytest.raises(AssertionError) as failure:
        assert_no_harmful_overflow(masked, "inf_nan")
    message = str(failure.value)
    assert "padding/Log (forward, inf_nan mode): harmful by reachability+replay" in message
    assert "mask the input of padding/Log before the op" in message
    assert "tf.where(mask, x, tf.ones_like(x))" in message
    # the log's gradient 1/x at the padding: inf, saturated in one mode, 0 * inf = NaN in the other
    grad = _site(masked, "gradients/padding/Log_grad/Reciprocal", "backward")
    assert grad["verdict"]["saturation"]["verdict"] == "benign"
    assert grad["verdict"]["inf_nan"]["verdict"] == "harmful"
    assert [s["skipped"] for s in masked["runs"]["inf_nan"]["steps"]] == [True, True]


def test_the_same_padding_unmasked_is_harmful(unmasked):
    log = _site(unmasked, "padding/Log")
    assert log["verdict"]["saturation"]["verdict"] == "harmful"
    assert "the loss or an applied gradient changes" in log["verdict"]["saturation"]["evidence"]
    finding = _finding(unmasked, "harmful_overflow", "padding/Log")
    assert finding["severity"] == "error" and finding["fix"]["kind"] == "code_edit"
    assert finding["verified"] is None
    with pytest.raises(AssertionError, match="padding/Log"):
        assert_no_harmful_overflow(unmasked)


def test_a_start_at_2_to_the_32_wastes_17_steps_and_the_advised_scale_none(wasted):
    # the backward matmul's result is the scale itself: it overflows float16 while the scale
    # exceeds 65504, and the scale halves at every skipped step from 2**32
    scales = [2.0 ** (32 - k) for k in range(19)]
    wasted_by_hand = sum(1 for s in scales if s > F16_MAX)
    assert wasted_by_hand == 17
    steps = wasted["runs"]["saturation"]["steps"]
    assert [s["loss_scale"] for s in steps[:18]] == scales[:18]
    assert [s["skipped"] for s in steps] == [True] * 17 + [False] * 2
    waste = _finding(wasted, "wasted_start")
    assert "exactly %d steps" % wasted_by_hand in waste["title"]
    harmful = _finding(wasted, "harmful_overflow")
    assert harmful["fix"]["kind"] == "manager_setting"
    assert harmful["fix"]["settings"] == {"init_loss_scale": 2.0 ** 15}  # largest <= 65504
    for finding in (waste, harmful):
        assert finding["verified"]["skipped_before"] == 17
        assert finding["verified"]["skipped_after"] == 0
        assert finding["verified"]["loss_scale_after"][0] == 2.0 ** 15


def test_a_model_rounding_to_float16_through_the_package_wastes_the_same_17_steps(
        tmp_path_factory):
    """The emulation's rounding is one float32 op (no float16 tensor in the graph): the script
    still computes in float16 on the device, its gradients face float16, and no finding calls
    it a float32 script."""
    report = _doctor(tmp_path_factory, "wasted_start_rounded", steps=19, modes="saturation",
                     verify=False)
    steps = report["runs"]["saturation"]["steps"]
    assert [s["skipped"] for s in steps] == [True] * 17 + [False] * 2
    assert "exactly 17 steps" in _finding(report, "wasted_start")["title"]
    assert not [f for f in report["findings"] if f["kind"] == "fp32_to_fp16"]


def test_a_fix_re_run_records_its_steps_and_judges_no_site(wasted):
    # the re-run verifying init_loss_scale=2**15 replays nothing: its sites get no verdict,
    # while the saturation run judged the matmul's backward site
    runs = os.path.join(wasted["command"][wasted["command"].index("--out") + 1], "runs")
    with open(os.path.join(runs, "saturation.result.json"), encoding="utf-8") as handle:
        first = json.load(handle)
    re_runs = [name for name in os.listdir(runs)
               if name.startswith("verify-") and name.endswith(".result.json")]
    assert re_runs and first["verdicts"]
    for name in re_runs:
        with open(os.path.join(runs, name), encoding="utf-8") as handle:
            result = json.load(handle)
        assert len(result["steps"]) == 19 and result["verdicts"] == {}


def test_a_scale_pinned_at_its_minimum_and_the_op_kept_in_float32_by_modify_mixlist(
        tmp_path_factory):
    # allow_mix_precision runs the matmul in float16: 300 * 300 * 2 = 180000 > 65504 at every
    # scale, so every step skips and the scale halves from 8 to Ascend's minimum, 1
    report = _doctor(tmp_path_factory, "pinned_at_minimum", steps=6, modes="saturation",
                     precision_mode="allow_mix_precision")
    steps = report["runs"]["saturation"]["steps"]
    assert [s["loss_scale"] for s in steps] == [8.0, 4.0, 2.0, 1.0, 1.0, 1.0]
    assert all(s["skipped"] for s in steps)
    assert _finding(report, "scale_pinned_at_minimum")["severity"] == "error"
    [site] = [s for s in report["sites"] if s["op_name"].startswith("dense/MatMul_precision/")]
    assert site["rounded_op"] == {"op_name": "dense/MatMul", "op_type": "MatMul"}
    assert site["max_magnitude"] == 180000.0
    harmful = _finding(report, "harmful_overflow")
    assert harmful["fix"]["kind"] == "keep_fp32"
    # Ascend's IR name for TensorFlow's MatMul, as the device's modify_mixlist names it
    assert harmful["fix"]["modify_mixlist"] == {"black-list": {"to-add": ["MatMulV2"]}}
    assert harmful["verified"]["skipped_before"] == 6
    assert harmful["verified"]["skipped_after"] == 0
    assert harmful["verified"]["loss_scale_after"] == [8.0] * 6


def test_a_clean_script_gets_the_clean_finding_only(tmp_path_factory):
    report = _doctor(tmp_path_factory, "clean", steps=3, modes="saturation", verify=False)
    assert report["sites"] == []
    assert [s["skipped"] for s in report["runs"]["saturation"]["steps"]] == [False] * 3
    assert report["findings"][0]["kind"] == "clean"
    assert not [f for f in report["findings"] if f["severity"] != "info"]
    assert_no_harmful_overflow(report)


def test_steps_without_an_overflow_check_are_recorded_and_not_called_clean(tmp_path_factory):
    # FixedLossScaleManager(10, enable_overflow_check=False): 3 steps at scale 10, none checked
    report = _doctor(tmp_path_factory, "no_overflow_check", steps=3, modes="saturation",
                     verify=False)
    steps = report["runs"]["saturation"]["steps"]
    assert [s["loss_scale"] for s in steps] == [10.0] * 3
    assert [s["skipped"] for s in steps] == [None] * 3
    assert report["outcome"] == "step_limit"
    assert not [f for f in report["findings"] if f["kind"] in ("clean", "wasted_start",
                                                               "scale_pinned_at_minimum")]
    assert "3 steps, 0 skipped, 0 applied, 3 not checked for overflow" in summary(report)


@estimator_only
def test_an_estimator_scripts_steps_and_verdicts(tmp_path_factory):
    """tests/scripts/ascend_estimator_run_config.py: NPUEstimator, precision_mode
    allow_mix_precision from its NPURunConfig, loss = sum([[1, 1]] @ kernel)."""
    model_dir = str(tmp_path_factory.mktemp("model_dir"))
    report = run_doctor(os.path.join(os.path.dirname(SCRIPTS), "ascend_estimator_run_config.py"),
                        "--model_dir", model_dir, "--iterations_per_loop", "1",
                        "--train_steps", "20", out=str(tmp_path_factory.mktemp("estimator")),
                        steps=3, modes="saturation", verify=False)
    assert report["front_end"] == "Estimator" and report["outcome"] == "step_limit"
    steps = report["runs"]["saturation"]["steps"]
    # the kernel's gradient is the scale, rounded to float16 by the matmul: 2**17 and 2**16
    # overflow (> 65504), 2**15 does not
    assert [s["loss_scale"] for s in steps] == [2.0 ** 17, 2.0 ** 16, 2.0 ** 15]
    assert [s["skipped"] for s in steps] == [True, True, False]
    assert [s["loss"] for s in steps] == [2.0, 2.0, 2.0]
    verdicts = {s["rounded_op"]["op_name"]: s["verdict"]["saturation"] for s in report["sites"]}
    # dL/dkernel reaches the update; dL/dx (x is data) reaches nothing the optimizer applies
    assert verdicts["gradients/MatMul_grad/MatMul_1"]["verdict"] == "harmful"
    assert verdicts["gradients/MatMul_grad/MatMul"] == {
        "verdict": "benign", "method": "reachability", "evidence": "no path from "
        "%s to the loss or any applied gradient" % [s["op_name"] for s in report["sites"] if
                                                    s["rounded_op"]["op_name"] ==
                                                    "gradients/MatMul_grad/MatMul"][0]}


@tf2_only
def test_an_eager_grad_scaler_loop_has_its_steps_recorded(tmp_path_factory):
    report = _doctor(tmp_path_factory, "grad_scaler_eager", steps=4, modes="saturation",
                     verify=False)
    assert report["front_end"] == "GradScaler" and report["scaler"]["kind"] == "grad_scaler"
    steps = report["runs"]["saturation"]["steps"]
    # the gradient is the scale in float16: inf from 2**16 = 65536 > 65504, finite at 2**15
    assert [s["loss_scale"] for s in steps] == [2.0 ** 18, 2.0 ** 17, 2.0 ** 16, 2.0 ** 15]
    assert [s["skipped"] for s in steps] == [True, True, True, False]
    assert [s["next_loss_scale"] for s in steps] == [2.0 ** 17, 2.0 ** 16, 2.0 ** 15, 2.0 ** 15]
    assert not [f for f in report["findings"] if f["kind"] == "clean"]


def test_the_report_file_is_the_report_in_standard_json(wasted):
    with open(_out_of(wasted), encoding="utf-8") as handle:
        text = handle.read()
    on_disk = json.loads(text, parse_constant=lambda name: pytest.fail("non-standard " + name))
    assert on_disk["schema"] == "npu-loss-scale/doctor-report" and on_disk["schema_version"] == 1
    assert on_disk["steps_requested"] == 19 and on_disk["outcome"] == "step_limit"
    assert on_disk["front_end"] == "NPULossScaleOptimizer"
    assert on_disk["scaler"]["kind"] == "ascend_exponential"
    assert on_disk["scaler"]["settings"]["init_loss_scale"] == 2.0 ** 32


def _out_of(report):
    return report["command"][report["command"].index("--out") + 1] + os.sep + "doctor.json"


@pytest.mark.parametrize("name, outcome, steps, detail", [
    ("crashes", "crashed", 2, "RuntimeError: the data loader lost its files"),
    ("no_optimizer", "no_loss_scale_optimizer", 0, "without building a loss-scale optimizer"),
])
def test_a_run_that_does_not_reach_its_steps_still_gets_a_report(tmp_path_factory, name,
                                                                 outcome, steps, detail):
    report = _doctor(tmp_path_factory, name, steps=5, modes="saturation", verify=False)
    assert report["outcome"] == outcome and detail in report["outcome_detail"]
    assert len(report["runs"]["saturation"]["steps"]) == steps
    assert os.path.exists(_out_of(report))


def test_ctrl_c_stops_the_run_and_the_report_says_so(tmp_path):
    """SIGINT to the command's process group, as a terminal's Ctrl-C sends it, once the script
    hangs after its second step."""
    out = tmp_path / "report"
    command = [sys.executable, "-m", "npu_loss_scale", "doctor", "--steps", "5", "--out",
               str(out), os.path.join(SCRIPTS, "hangs.py")]
    proc = subprocess.Popen(  # SIGINT as a terminal leaves it (a background job ignores it)
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    result = out / "runs" / "saturation.result.json"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if result.exists() and len(json.loads(result.read_text())["steps"]) == 2:
            break
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    output, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, output
    report = json.loads((out / "doctor.json").read_text())
    assert report["outcome"] == "stopped", output
    assert report["outcome_detail"] == "stopped by SIGINT after 2 steps"
    assert list(report["runs"]) == ["saturation"]   # the inf_nan run was not started
    assert "hangs.py (NPULossScaleOptimizer), stopped" in output
