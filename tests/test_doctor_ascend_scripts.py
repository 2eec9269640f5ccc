"""scripts/doctor_ascend_scripts.py: the doctor's command through try_ascend_scripts.run_one, and
the counts of its summary over hand-written doctor reports (no TensorFlow run: the doctor itself
is tested in test_doctor.py)."""
import importlib.util
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DRIVER = os.path.join(REPO, "scripts", "doctor_ascend_scripts.py")


def _driver():
    spec = importlib.util.spec_from_file_location("doctor_ascend_scripts", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _finding(kind, fix=None, verified=None, site=None):
    return {"kind": kind, "site": site, "fix": fix and {"kind": fix}, "verified": verified}


def _report(runs, findings):
    return {"runs": {mode: {"steps": [{"step": i + 1} for i in range(n)]}
                     for mode, n in runs.items()},
            "findings": findings}


def _keep(root, i, script, report):
    folder = os.path.join(root, "%02d" % i)
    os.makedirs(os.path.join(folder, "doctor"))
    with open(os.path.join(folder, "result.json"), "w", encoding="utf-8") as out:
        json.dump({"script": script, "barrier": "-"}, out)
    if report is not None:
        with open(os.path.join(folder, "doctor", "doctor.json"), "w", encoding="utf-8") as out:
            json.dump(report, out)


def _kept_run(root):
    """Four scripts: two with findings and verified fixes, one that reached no step, one whose
    doctor wrote no report."""
    _keep(root, 0, "a/Bert_ID1_for_TensorFlow/run.py", _report(
        {"saturation": 10, "inf_nan": 10},
        [_finding("wasted_start", "manager_setting",
                  {"skipped_before": 9, "skipped_after": 0, "steps": 10}),
         _finding("mode_source", "sat_mode"),
         _finding("benign_overflow", "sat_mode",
                  {"skipped_before": 4, "skipped_after": 1, "steps": 10}, site="m/Exp")]))
    _keep(root, 1, "b/Gnmt_ID2_for_TensorFlow/nmt.py", _report(
        {"saturation": 3, "inf_nan": 0},
        [_finding("mode_source", "sat_mode"), _finding("mode_source", "sat_mode")]))
    _keep(root, 2, "c/Arc_ID3_for_TensorFlow/train.py", _report(
        {"saturation": 0, "inf_nan": 0}, []))
    _keep(root, 3, "d/Crash_ID4_for_TensorFlow/train.py", None)
    os.makedirs(os.path.join(root, "04"))   # a folder the run had not finished: no result.json


def test_summary_counts_scripts_per_finding_kind_and_each_verified_fix(tmp_path):
    driver = _driver()
    _kept_run(str(tmp_path))
    counts = driver.summarize(driver.load_reports(str(tmp_path)))
    assert counts["scripts"] == 4
    assert counts["reached"] == ["a/Bert_ID1_for_TensorFlow/run.py",
                                 "b/Gnmt_ID2_for_TensorFlow/nmt.py"]
    assert counts["no_report"] == ["d/Crash_ID4_for_TensorFlow/train.py"]
    # a script counts once per kind, however many findings of that kind it has
    assert counts["kinds"] == {
        "benign_overflow": ["a/Bert_ID1_for_TensorFlow/run.py"],
        "mode_source": ["a/Bert_ID1_for_TensorFlow/run.py", "b/Gnmt_ID2_for_TensorFlow/nmt.py"],
        "wasted_start": ["a/Bert_ID1_for_TensorFlow/run.py"]}
    assert [(f["finding"], f["fix"], f["before"], f["after"], f["steps"], f["saved"])
            for f in counts["fixes"]] == [("wasted_start", "manager_setting", 9, 0, 10, 9),
                                          ("benign_overflow", "sat_mode", 4, 1, 10, 3)]


def test_summarize_command_prints_the_counts_of_a_kept_folder(tmp_path):
    _kept_run(str(tmp_path))
    proc = subprocess.run([sys.executable, DRIVER, "--summarize", str(tmp_path)],
                          capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    assert lines[0] == ("scripts run through the doctor: 4; a loss-scale step reached: 2; "
                        "no report: 1")
    assert "  mode_source               2  Bert_ID1_for_TensorFlow, Gnmt_ID2_for_TensorFlow" \
        in lines
    assert ("  Bert_ID1_for_TensorFlow: manager_setting for wasted_start: 9 of 10 -> 0 of 10 "
            "(saved 9)") in lines
    assert "| `wasted_start` | 1 (Bert_ID1_for_TensorFlow) |" in lines
    assert "| script | saturation run | inf_nan run |" in lines
    assert "| Gnmt_ID2_for_TensorFlow | ?, 3 steps, 0 skipped | ?, 0 steps, 0 skipped |" in lines
    assert "| Crash_ID4_for_TensorFlow | no report | no report |" in lines
    refused = subprocess.run([sys.executable, DRIVER, "--summarize", str(tmp_path / "none")],
                             capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and \
        "--summarize takes one or more folders kept by --keep" in refused.stderr


def test_summarize_merges_folders_a_script_run_again_counted_once_with_its_later_report(
        tmp_path):
    """A second pass over two of the scripts: Gnmt, run again, now has a verified fix and a step
    count of its own; Crash, run again, now has a report; the others stay as the first pass left
    them."""
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    _kept_run(first)
    _keep(second, 0, "b/Gnmt_ID2_for_TensorFlow/nmt.py", _report(
        {"saturation": 30, "inf_nan": 30},
        [_finding("wasted_start", "manager_setting",
                  {"skipped_before": 20, "skipped_after": 2, "steps": 30, "after_steps": 4})]))
    _keep(second, 1, "d/Crash_ID4_for_TensorFlow/train.py", _report(
        {"saturation": 0, "inf_nan": 0}, []))
    driver = _driver()
    counts = driver.summarize(driver.merge_reports([first, second]))
    assert counts["scripts"] == 4
    assert counts["no_report"] == []
    assert counts["reached"] == ["a/Bert_ID1_for_TensorFlow/run.py",
                                 "b/Gnmt_ID2_for_TensorFlow/nmt.py"]
    assert counts["kinds"]["mode_source"] == ["a/Bert_ID1_for_TensorFlow/run.py"]
    assert counts["kinds"]["wasted_start"] == ["a/Bert_ID1_for_TensorFlow/run.py",
                                               "b/Gnmt_ID2_for_TensorFlow/nmt.py"]
    assert [(f["script"], f["before"], f["after"], f["saved"]) for f in counts["fixes"]
            if f["finding"] == "wasted_start"] == [
                ("a/Bert_ID1_for_TensorFlow/run.py", 9, 0, 9),
                ("b/Gnmt_ID2_for_TensorFlow/nmt.py", 20, 2, 18)]
    proc = subprocess.run([sys.executable, DRIVER, "--summarize", first, second],
                          capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        "scripts run through the doctor: 4; a loss-scale step reached: 2; no report: 0")
    # the script stops after its applied steps: the fixed run made 4 steps, not 30
    assert "  Gnmt_ID2_for_TensorFlow: manager_setting for wasted_start: 20 of 30 -> 2 of 4 " \
        "(saved 18)" in lines
    assert "| Gnmt_ID2_for_TensorFlow | `wasted_start` | `manager_setting` | 20 of 30 -> 2 of 4 " \
        "| 18 |" in lines


def test_a_run_in_a_few_words():
    driver = _driver()
    assert driver.run_cell({"outcome": "completed", "steps": 2, "skipped_steps": 0}) == \
        "completed, 2 steps, 0 skipped"
    assert driver.run_cell({"outcome": "stopped", "steps": [{"skipped": True}],
                            "outcome_detail": "stopped by the timeout"}) == \
        "stopped, 1 step, 1 skipped: stopped by the timeout"
    assert driver.run_cell({"outcome": "crashed", "steps": 0, "skipped_steps": 0,
                            "outcome_detail": "Traceback:\n  File \"t.py\", line 3\n"
                                              "NameError: name 'x' is not defined\n"}) == \
        "crashed, 0 steps, 0 skipped: NameError: name 'x' is not defined"
    assert driver._short("x/cv/ModelZoo_CTPN_TF_HARD/ModelZoo_CTPN_TF_HARD/m/train.py") == \
        "ModelZoo_CTPN_TF_HARD"


def test_the_doctor_launcher_comes_before_tf1_the_script_and_its_arguments(tmp_path):
    """run_one with the doctor's launcher: the interpreter is this Python, the "doctor" a
    one-line program that writes the arguments it got, so the command line is checked as run."""
    driver = _driver()
    corpus = tmp_path / "corpus"
    script = corpus / "m" / "train.py"
    script.parent.mkdir(parents=True)
    script.write_text("flags.DEFINE_integer('train_steps', 5, '')\n", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    argv_file = tmp_path / "argv.json"
    expected_launch = driver.doctor_launcher(7, "inf_nan", 30.0)(str(work))
    assert expected_launch == ["-m", "npu_loss_scale", "doctor", "--steps", "7", "--modes",
                               "inf_nan", "--timeout", "30", "--out", str(work / "doctor")]
    recorder = ["-c", "import json, sys; json.dump(sys.argv[1:], open(%r, 'w'))" % str(argv_file),
                "--"] + expected_launch
    result = driver.trying.run_one(str(corpus), str(script), ["--extra=1"], sys.executable, 60,
                                   str(work), launcher=recorder)
    assert result["barrier"] == "-"
    got = json.loads(argv_file.read_text(encoding="utf-8"))
    assert got == ["--"] + expected_launch + [
        "--tf1", str(script), "--train_steps=2", "--extra=1"]
