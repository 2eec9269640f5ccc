"""One process of ``npu-loss-scale doctor``: starts :mod:`npu_loss_scale.cli.doctor_run` on the
script with the run's emulation options, waits for it (a timeout or Ctrl-C stops it with
SIGTERM), and returns what it recorded; a process that died without a word is a crash with the
end of its log."""
import json
import os
import signal
import subprocess
import sys

from npu_loss_scale.cli.doctor_checkpoints import describe

__all__ = ["run_script", "mixlist_supported"]


def mixlist_supported():
    """True when ``npu-emulate`` takes ``--modify-mixlist`` (the precision emulation honours
    Ascend's modify_mixlist JSON)."""
    from npu_loss_scale.cli import emulate_args  # pylint: disable=import-outside-toplevel
    return any("--modify-mixlist" in a.option_strings
               for a in emulate_args.build_parser()._actions)  # pylint: disable=protected-access


def _emulate_argv(args, mode, overflow_report, mixlist_path):
    argv = ["--saturate-every-op", "--sat-mode", mode, "--overflow-report", overflow_report]
    if args.precision_mode is not None:
        argv += ["--precision-mode", args.precision_mode]
    if args.tf1:
        argv.append("--tf1")
    if mixlist_path is not None:
        argv += ["--modify-mixlist", mixlist_path]
    argv += (["-m", args.script] if args.as_module else [args.script])
    return argv + list(args.script_args)


def _tail(path, lines=6):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_script(args, mode, name, settings=None, mixlist=None, ledger=None, judge=True):  # pylint: disable=too-many-arguments
    """Runs the script once in ``mode`` ("saturation" or "inf_nan"), ``settings`` replacing the
    manager's or scaler's constructor arguments of those names and ``mixlist`` (Ascend's
    modify_mixlist JSON, a dict) applied; the run's result (see doctor_run). ``ledger`` (a
    :class:`~npu_loss_scale.cli.doctor_checkpoints.Ledger`) holds the checkpoints earlier runs
    wrote, which this run does not resume from, and takes in this run's. ``judge=False``: the
    run records its steps and sites and decides no verdict (no replay: a fix's re-run).

    The result's ``stopped_by`` is ``"timeout"`` (this run alone was stopped: the doctor goes
    on) or ``"SIGINT"`` (Ctrl-C: the doctor ends its runs) when the doctor stopped it."""
    folder = os.path.join(args.out, "runs")
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(folder, name)
    result_path, log_path = base + ".result.json", base + ".log"
    for stale in (result_path, log_path):
        if os.path.exists(stale):
            os.remove(stale)
    with open(base + ".config.json", "w", encoding="utf-8") as out:
        config = {"steps": args.steps, "settings": settings or {},
                  "precision_mode": args.precision_mode, "judge": bool(judge)}
        config.update(ledger.config() if ledger is not None else {})
        json.dump(config, out)
    mixlist_path = None
    if mixlist is not None:
        mixlist_path = base + ".mixlist.json"
        with open(mixlist_path, "w", encoding="utf-8") as out:
            json.dump(mixlist, out)
    command = [sys.executable, "-m", "npu_loss_scale.cli.doctor_run", result_path,
               base + ".config.json", "--"] + _emulate_argv(
                   args, mode, base + ".overflow.jsonl", mixlist_path)
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    stopped_here = stopped_by = None
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)  # pylint: disable=consider-using-with
        try:
            proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            stopped_here = "stopped after the --timeout of %g s" % args.timeout
            stopped_by = "timeout"
            _stop(proc)
        except KeyboardInterrupt:
            stopped_here, stopped_by = "stopped by SIGINT", "SIGINT"
            _stop(proc)
    try:
        with open(result_path, encoding="utf-8") as handle:
            result = json.load(handle)
    except (OSError, ValueError):
        result = {"outcome": "crashed", "steps": [], "verdicts": {},
                  "outcome_detail": "the run ended (exit code %s) without a result; the end "
                                    "of its log:\n%s" % (proc.returncode, _tail(log_path))}
    if stopped_here is not None:
        result["outcome"], result["stopped_by"] = "stopped", stopped_by
        result["outcome_detail"] = "%s after %d steps%s" % (
            stopped_here, len(result.get("steps", [])),
            describe(result.get("checkpoints_ignored")))
    elif result.get("outcome") is None:  # ended between two steps without its last word
        result["outcome"] = "crashed"
        result["outcome_detail"] = "the run ended (exit code %s) before it said how; the end " \
                                   "of its log:\n%s" % (proc.returncode, _tail(log_path))
    elif result.get("outcome") == "crashed" and not result.get("outcome_detail"):
        result["outcome_detail"] = _tail(log_path)
    result["log"] = log_path
    if ledger is not None:
        ledger.add(name, result)
    return result
