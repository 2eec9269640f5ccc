"""Cost of ``npu-loss-scale doctor`` on the BERT main job, measured in one run against the plain
emulated run of the same steps.

    python scripts/bench_doctor.py [--steps 50] [--modes saturation,inf_nan] [--no-verify]
                                   [--out DIR] [-- extra run_classifier flags]

The job is ``examples/bert/run_classifier.py`` as ``scripts/run_main.sh`` runs it in fp16
(``--precision=fp16 --npu_bert_loss_scale=0``: Ascend's exponential manager from 2**32; its
packages installed by ``bash scripts/run_bert.sh --setup-only``), with ``--heldout 100`` so the
evaluation after training is one batch. Two commands, one after the other, each timed by the
wall clock from its start to its exit:

  doctor     python -m npu_loss_scale doctor --steps N ... run_classifier.py ...: its runs in
             each mode, the replays that judge the sites and the re-runs verifying the fixes
  plain      python -m npu_loss_scale.emulate --saturate-every-op run_classifier.py ...
             --train_steps=A, A the applied steps of the doctor's saturation run: the same
             N steps (A applied, the others skipped), as the doctor's runs see the device,
             without the doctor                                                 <- the baseline

The ratio doctor / plain is printed, with the doctor's runs (mode, steps, outcome) and the
baseline's applied and skipped steps (from ``npu-emulate --report``). Both include the start of
the process (TensorFlow import, tokenisation, graph building), which each of the doctor's runs
repeats. Where the doctor's time goes is printed per run (each mode's run and each re-run
verifying a fix: the seconds from its start to the last line of its log, and the line in which
it says how long judging its sites took). Compare ratios from one run, not across runs or machines; ``uptime`` is printed before
and after.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import checkout

REPO = checkout.REPO
SCRIPT = os.path.join(REPO, "examples", "bert", "run_classifier.py")
JOB_FLAGS = ["--precision=fp16", "--npu_bert_loss_scale=0", "--heldout=100",
             "--progress_bar=false"]


def _uptime():
    try:
        with open("/proc/loadavg", encoding="utf-8") as handle:
            return "load average %s" % " ".join(handle.read().split()[:3])
    except OSError:
        return "load average unknown"


def _timed(cmd, log_path):
    env = checkout.environment(dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"))
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    seconds = time.monotonic() - start
    if code != 0:
        raise SystemExit("exit code %d from %s (log: %s)" % (code, " ".join(cmd), log_path))
    return seconds


def _runs_timed(folder):
    """The doctor's runs in the order they started: (name, seconds from the writing of its
    config to the last write of its log, the judging line of its log or "")."""
    out = []
    for name in os.listdir(folder):
        if not name.endswith(".config.json"):
            continue
        run = name[:-len(".config.json")]
        log = os.path.join(folder, run + ".log")
        start = os.path.getmtime(os.path.join(folder, name))
        judged = ""
        if os.path.exists(log):
            with open(log, encoding="utf-8", errors="replace") as handle:
                judged = " ".join(line.strip()[len("doctor: "):] for line in handle
                                  if line.startswith("doctor: judged "))
        out.append((start, run, os.path.getmtime(log) - start if os.path.exists(log) else
                    float("nan"), judged))
    return [entry[1:] for entry in sorted(out)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--steps", type=int, default=50, help="loss-scale steps (default 50)")
    parser.add_argument("--modes", default="saturation,inf_nan", help="the doctor's --modes")
    parser.add_argument("--no-verify", action="store_true", help="the doctor's --no-verify")
    parser.add_argument("--out", help="folder for the report and logs (default: a temporary one)")
    parser.add_argument("extra", nargs="*", help="more flags of run_classifier.py, after --")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be an int >= 1; got %d" % args.steps)
    if "saturation" not in args.modes.split(","):
        parser.error("--modes must include saturation (the baseline repeats that run); got %r"
                     % args.modes)
    out = os.path.abspath(args.out or tempfile.mkdtemp(prefix="bench_doctor_"))
    os.makedirs(out, exist_ok=True)
    job = JOB_FLAGS + ["--output_dir=%s" % os.path.join(out, "doctor-run")] + args.extra
    print("TensorFlow BERT main job, fp16, first %d loss-scale steps; %s" % (args.steps,
                                                                           _uptime()), flush=True)
    doctor_cmd = [sys.executable, "-m", "npu_loss_scale", "doctor", "--steps", str(args.steps),
                  "--modes", args.modes, "--out", os.path.join(out, "doctor")]
    doctor_cmd += (["--no-verify"] if args.no_verify else []) + [SCRIPT] + job
    doctor_s = _timed(doctor_cmd, os.path.join(out, "doctor.log"))
    with open(os.path.join(out, "doctor", "doctor.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    for mode, run in report["runs"].items():
        print("  doctor %-10s %s: %d steps, %d skipped, %d applied" % (
            mode, run["outcome"], len(run["steps"]), run["skipped_steps"], run["applied_steps"]))
    for run, seconds, judged in _runs_timed(os.path.join(out, "doctor", "runs")):
        print("  doctor run %-22s %7.1f s  %s" % (run, seconds, judged))
    verified = [f for f in report["findings"] if f.get("verified")]
    print("  doctor findings: %s; verified fixes (re-runs): %d" % (
        ", ".join(sorted({f["kind"] for f in report["findings"]})) or "-", len(verified)))
    applied = report["runs"]["saturation"]["applied_steps"]
    if applied < 1:
        raise SystemExit("the doctor's saturation run applied no step in %d: no baseline of the "
                         "same steps (give more --steps)" % args.steps)
    plain_report = os.path.join(out, "plain.report.json")
    plain_cmd = [sys.executable, "-m", "npu_loss_scale.emulate", "--saturate-every-op",
                 "--sat-mode", "saturation", "--report", plain_report, SCRIPT]
    plain_cmd += JOB_FLAGS + ["--output_dir=%s" % os.path.join(out, "plain-run"),
                              "--train_steps=%d" % applied] + args.extra
    plain_s = _timed(plain_cmd, os.path.join(out, "plain.log"))
    if os.path.exists(plain_report):
        with open(plain_report, encoding="utf-8") as handle:
            plain = json.load(handle)
        print("  plain  saturation: %d steps, %d skipped, %d applied (--train_steps=%d)" % (
            plain.get("steps_applied", 0) + plain.get("steps_skipped", 0),
            plain.get("steps_skipped", 0), plain.get("steps_applied", 0), applied))
    else:  # the report counts npu_bridge's shim optimizers only: the job's own one is not
        print("  plain  saturation: --train_steps=%d (no --report written: the job builds no "
              "npu_bridge optimizer; its steps are in %s)" % (applied, os.path.join(
                  out, "plain.log")))
    print()
    print("%-8s %9s %7s" % ("variant", "wall s", "ratio"))
    print("%-8s %9.1f %7.2f   <- baseline" % ("plain", plain_s, 1.0))
    print("%-8s %9.1f %7.2f" % ("doctor", doctor_s, doctor_s / plain_s))
    print("%s; report and logs in %s" % (_uptime(), out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
