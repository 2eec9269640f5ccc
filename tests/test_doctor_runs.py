"""npu-loss-scale doctor's runs are independent of each other and end as users expect: no run
resumes from a checkpoint an earlier run of the same doctor wrote (a checkpoint the user had
before the doctor is still found), ``--timeout`` stops one run and the doctor goes on, SIGTERM
in the replay after the steps ends the run promptly with what it recorded.

The scripts are tests/scripts/doctor/resumes_*.py and slow_*.py. Every expected number is
worked out from the script: ``loss = w * w / 2``, ``w`` from 2.0, SGD at 0.125, so ``w`` is
multiplied by 0.875 at each applied step and the loss of the step after k of them is
2 * 0.765625 ** k."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from npu_loss_scale.pytest_plugin import run_doctor
from tf_versions import estimator_only

pytestmark = pytest.mark.slow

SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts", "doctor")


def _losses(report, mode):
    return [s["loss"] for s in report["runs"][mode]["steps"]]


def _after(start, k):
    """The losses of k steps after ``start`` applied ones from w = 2.0 (float32 rounding)."""
    return pytest.approx([2.0 * 0.765625 ** i for i in range(start, start + k)], rel=1e-6)


def _fresh(k):
    return _after(0, k)


def test_a_saver_loop_does_not_resume_the_second_run_from_the_firsts_checkpoints(tmp_path):
    model_dir = tmp_path / "model"
    report = run_doctor(os.path.join(SCRIPTS, "resumes_saver.py"), "--model_dir", model_dir,
                        out=str(tmp_path / "report"), steps=3, verify=False)
    # three steps each from w = 2.0 (without the fix the INF/NaN run restored model.ckpt-2,
    # the saturation run's last save before its step limit: the losses of steps 3 to 5)
    assert _losses(report, "saturation") == _fresh(3)
    assert _losses(report, "inf_nan") == _fresh(3)
    assert "without the checkpoints of earlier runs of this doctor (saturation run: " \
           "model.ckpt-1, model.ckpt-2)" in report["runs"]["inf_nan"]["outcome_detail"]
    assert "earlier runs" not in report["runs"]["saturation"]["outcome_detail"]
    assert (model_dir / "model.ckpt-1.index").exists()  # nothing of the runs' was deleted


def test_a_checkpoint_the_user_had_before_the_doctor_is_restored_in_every_run(tmp_path):
    model_dir = tmp_path / "model"
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "npu-emulate"),
                    os.path.join(SCRIPTS, "resumes_saver.py"), "--model_dir", str(model_dir),
                    "--train_steps", "2"], check=True, capture_output=True, timeout=600)
    report = run_doctor(os.path.join(SCRIPTS, "resumes_saver.py"), "--model_dir", model_dir,
                        out=str(tmp_path / "report"), steps=3, verify=False)
    # both runs start from the user's model.ckpt-2 (two steps applied), not from fresh and not
    # from the saturation run's model.ckpt-3 / -4
    assert _losses(report, "saturation") == _after(2, 3)
    assert _losses(report, "inf_nan") == _after(2, 3)
    for mode in ("saturation", "inf_nan"):
        log = (tmp_path / "report" / "runs" / (mode + ".log")).read_text()
        assert "restored " in log and log.split("restored ")[1].split()[0].endswith(
            os.path.join("model", "model.ckpt-2")), log
    assert "(saturation run: model.ckpt-3, model.ckpt-4)" in \
        report["runs"]["inf_nan"]["outcome_detail"]


@estimator_only
def test_an_estimator_trains_the_same_steps_in_both_modes_and_evaluates_its_own(tmp_path):
    """train(max_steps=3) then evaluate(): without the fix the INF/NaN run found the saturation
    run's model.ckpt-3 at max_steps and trained none; its evaluate reads its own checkpoint."""
    out = tmp_path / "report"
    report = run_doctor(os.path.join(SCRIPTS, "resumes_estimator.py"), "--model_dir",
                        tmp_path / "model", "--train_steps", "3", out=str(out), steps=5,
                        verify=False)
    for mode in ("saturation", "inf_nan"):
        assert report["runs"][mode]["outcome"] == "completed", report["runs"][mode]
        assert _losses(report, mode) == _fresh(3)
        # evaluate after 3 steps: w = 2 * 0.875 ** 3 = 1.33984375, loss w * w / 2 = 0.89759...
        assert "eval loss 0.8976 at step 3" in (out / "runs" / (mode + ".log")).read_text()
    assert "(saturation run: model.ckpt-0, model.ckpt-1, model.ckpt-2, model.ckpt-3)" in \
        report["runs"]["inf_nan"]["outcome_detail"]


def test_a_timeout_stops_one_run_and_the_doctor_goes_on(tmp_path):
    """slow_in_saturation.py waits for ever after two steps in saturation mode only."""
    report = run_doctor(os.path.join(SCRIPTS, "slow_in_saturation.py"),
                        out=str(tmp_path / "report"), steps=5, timeout=90)
    sat, inf_nan = report["runs"]["saturation"], report["runs"]["inf_nan"]
    assert sat["outcome"] == "stopped"
    assert sat["outcome_detail"] == "stopped after the --timeout of 90 s after 2 steps"
    assert len(sat["steps"]) == 2
    assert inf_nan["outcome"] == "completed" and len(inf_nan["steps"]) == 2
    # wasted_start's model at scale 2**10: x @ kernel's gradient is the scale, finite
    assert [s["skipped"] for s in inf_nan["steps"]] == [False, False]


def _children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry, encoding="utf-8") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def test_sigterm_in_the_replay_ends_the_run_with_its_steps(tmp_path):
    """slow_replay.py: eight sites; each session run of the replay after the 2 steps stays 60 s
    in TensorFlow (a host op sleeps). SIGTERM to the run's process 5 s into the replay: before
    this change the run raised its stop only when that session run returned (60 s; the doctor's
    own SIGTERM is followed by a kill after 30 s, and the run had no result at all)."""
    out = tmp_path / "report"
    proc = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "npu_loss_scale", "doctor", "--steps", "2", "--modes",
         "saturation", "--no-verify", "--out", str(out), os.path.join(SCRIPTS, "slow_replay.py")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    result = out / "runs" / "saturation.result.json"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if result.exists() and len(json.loads(result.read_text())["steps"]) == 2:
            break
        time.sleep(0.2)
    time.sleep(5)
    runs = _children(proc.pid)
    assert len(runs) == 1 and proc.poll() is None
    os.kill(runs[0], signal.SIGTERM)
    sent = time.time()
    while runs[0] in _children(proc.pid) and time.time() < sent + 120:
        time.sleep(0.1)
    ended_after = time.time() - sent
    output, _ = proc.communicate(timeout=300)
    assert ended_after < 20, ended_after   # the watchdog's 5 s grace, on a loaded machine
    report = json.loads((out / "doctor.json").read_text())
    run = report["runs"]["saturation"]
    assert run["outcome"] == "stopped", output
    assert run["outcome_detail"].startswith("stopped by SIGTERM after 2 steps"), run
    assert "the replay of the sites' verdicts" in run["outcome_detail"]
    assert len(run["steps"]) == 2
    assert [sorted(s["sites"]) for s in run["steps"]] == [
        ["site%d/mul_1" % i for i in range(8)]] * 2
    # the replay was in its first session run: no site decided, each marked as not judged
    assert sorted(s["op_name"] for s in report["sites"]) == ["site%d/mul_1" % i for i in range(8)]
    for site in report["sites"]:
        verdict = site["verdict"]["saturation"]
        assert verdict["verdict"] == "unknown" and verdict["method"] == "none", site
        assert "not judged: the run was stopped (SIGTERM)" in verdict["evidence"]


def test_steps_carry_the_largest_safe_scale(tmp_path):
    """wasted_start.py: the kernel's gradient of sum(x @ kernel) with x all ones is 1 (applied
    unscaled) and passes a float16 matmul: the largest power of two S with S * 1 < 65504 is
    2**15; the steps skipped at 2**32 ... 2**16 overflowed at their own scale (0)."""
    out = tmp_path / "report"
    report = run_doctor(os.path.join(SCRIPTS, "wasted_start.py"), out=str(out), steps=19,
                        modes="saturation", verify=False)
    steps = json.loads((out / "runs" / "saturation.result.json").read_text())["steps"]
    assert [s["max_safe_scale"] for s in steps] == [0.0] * 17 + [2.0 ** 15] * 2
    # the graph computes in float16: no finding about a float32 script's matmuls
    assert not [f for f in report["findings"] if f["kind"] == "fp32_to_fp16"]
