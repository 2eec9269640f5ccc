"""npu-loss-scale doctor refuses bad arguments, a missing script and a report folder it cannot
write before any script starts, each time naming the option, the value and what is accepted;
the report's small pieces (non-finite numbers in JSON, a site's layer); the pytest helper's
refusals. No TensorFlow is run here."""
import json
import os

import pytest

from npu_loss_scale.cli import doctor_args
from npu_loss_scale.pytest_plugin import assert_no_harmful_overflow
from npu_loss_scale.tools.doctor import report as doctor_report
from npu_loss_scale.tools.doctor.verdicts import neutralised

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "doctor", "clean.py")


@pytest.mark.parametrize("argv, words", [
    (["--steps", "0", SCRIPT], ["--steps", "must be an int >= 1", "got 0"]),
    (["--steps", "ten", SCRIPT], ["--steps", "invalid int value: 'ten'"]),
    (["--modes", "saturation,nan", SCRIPT], ["--modes", "'saturation,nan'", "saturation, inf_nan"]),
    (["--modes", "inf_nan,inf_nan", SCRIPT], ["--modes", "distinct modes"]),
    (["--precision-mode", "fp8", SCRIPT], ["--precision-mode", "'fp8'", "allow_mix_precision"]),
    (["--timeout", "-1", SCRIPT], ["--timeout", "seconds > 0", "'-1'"]),
    (["no_such_script.py"], ["no such script: 'no_such_script.py'", "-m"]),
    ([], ["the script to run is missing"]),
    (["-m"], ["-m needs a module name"]),
])
def test_bad_arguments_are_refused_naming_what_is_accepted(argv, words, capsys, tmp_path):
    with pytest.raises(SystemExit) as stop:
        doctor_args.parse(["--out", str(tmp_path / "out")] + argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err


def test_a_report_folder_that_cannot_be_written_is_refused_before_the_script_starts(
        tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    for out in (blocker, blocker / "report"):
        with pytest.raises(SystemExit):
            doctor_args.parse(["--out", str(out), SCRIPT])
        err = capsys.readouterr().err
        assert "--out must be a folder the report can be written to" in err and str(out) in err
    assert sorted(os.listdir(tmp_path)) == ["a_file"]   # nothing ran, nothing was written


def test_the_script_keeps_its_own_arguments(tmp_path):
    args = doctor_args.parse(["--steps", "3", "--out", str(tmp_path), SCRIPT, "--steps", "9",
                              "--modes", "x"])
    assert args.steps == 3 and args.modes == ["saturation", "inf_nan"]
    assert args.script == SCRIPT and args.script_args == ["--steps", "9", "--modes", "x"]


def test_non_finite_numbers_are_written_as_strings_and_read_back(tmp_path):
    path = str(tmp_path / "r.json")
    doctor_report.write_json({"a": [float("inf"), -float("inf"), float("nan"), 1.5]}, path)
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle) == {"a": ["inf", "-inf", "nan", 1.5]}
    assert [doctor_report.number(v) for v in ("inf", "-inf", 2)] == [float("inf"),
                                                                     -float("inf"), 2.0]


@pytest.mark.parametrize("op_name, layer", [
    ("metric/Exp", "metric"), ("Exp", ""),
    ("gradients/padding/Log_grad/Reciprocal", "padding/Log"),
    ("gradients_1/dense/MatMul_grad/MatMul", "dense/MatMul"),
])
def test_a_sites_layer_is_its_name_scope(op_name, layer):
    assert doctor_report.layer_of(op_name) == layer


def test_neutralising_replaces_the_overflowed_elements_only():
    value = [1.0, float("inf"), -float("inf"), float("nan"), 70000.0, -65504.0]
    assert neutralised(value, 65504.0).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, -65504.0]


def _report(verdicts, fed_by=None):
    return {"schema": "npu-loss-scale/doctor-report", "script": "train.py",
            "runs": {m: {"steps": [{"step": 1}]} for m in verdicts},
            "sites": [{"op_name": "a/Log", "direction": "forward", "fed_by": fed_by or {},
                       "verdict": {m: {"verdict": v, "method": "reachability+replay",
                                       "evidence": "the loss changes"}
                                   for m, v in verdicts.items()}}],
            "findings": []}


def test_assert_no_harmful_overflow_names_the_site_the_verdict_and_the_fix():
    report = _report({"saturation": "benign", "inf_nan": "harmful"})
    assert_no_harmful_overflow(report, "saturation")
    report["findings"].append({"kind": "harmful_overflow", "site": "a/Log", "fix": {
        "description": "mask the input", "code": "-  x\n+  y"}})
    with pytest.raises(AssertionError) as failure:
        assert_no_harmful_overflow(report)
    assert str(failure.value) == (
        "1 harmful overflow(s) in train.py:\n  a/Log (forward, inf_nan mode): harmful by "
        "reachability+replay: the loss changes\n    fix: mask the input\n      -  x\n      +  y")


def test_assert_no_harmful_overflow_refuses_what_proves_nothing():
    with pytest.raises(TypeError, match="takes the doctor's report"):
        assert_no_harmful_overflow({"runs": {}})
    with pytest.raises(ValueError, match=r"modes \['inf_nan'\]: the report ran saturation only"):
        assert_no_harmful_overflow(_report({"saturation": "benign"}), "inf_nan")
    empty = _report({"saturation": "benign"})
    empty["runs"]["saturation"]["steps"] = []
    with pytest.raises(AssertionError, match="ran no loss-scale step"):
        assert_no_harmful_overflow(empty)
