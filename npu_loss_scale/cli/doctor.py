"""``npu-loss-scale doctor``: for every overflow of a training script, whether it can change the
update, why, and a fix checked on the emulated device.

Usage::

    npu-loss-scale doctor [--steps N] [--out DIR] [--modes saturation,inf_nan]
                          [--precision-mode M] [--no-verify] [--tf1] [--timeout S]
                          script.py [script args ...]      (or -m module [args ...])

Each run is the unmodified script under ``npu-emulate --saturate-every-op`` in a process of its
own (:mod:`npu_loss_scale.cli.doctor_run`), once per overflow mode, stopped after N loss-scale
steps. The sites that overflowed get a verdict per mode
(:mod:`npu_loss_scale.tools.doctor.verdicts`), the findings a fix; the fixes that need no edit
are applied by a re-run of the same steps (:mod:`npu_loss_scale.cli.doctor_verify`). Written
to DIR: ``doctor.json`` (schema ``npu-loss-scale/doctor-report`` version 1, see
docs/reference/doctor-report.md), ``doctor.html`` when the optional libraries are installed,
each run's output as ``<run>.log``; a summary is printed. Exit code 0 whatever the script did
(the report says it), 2 for arguments refused before the script starts.
"""
import datetime
import os
import platform
import sys

from npu_loss_scale import __version__
from npu_loss_scale.cli import doctor_args, doctor_verify
from npu_loss_scale.cli.doctor_checkpoints import Ledger
from npu_loss_scale.cli.doctor_process import run_script
from npu_loss_scale.tools.doctor import report as _report
from npu_loss_scale.tools.doctor.site_findings import site_findings
from npu_loss_scale.tools.doctor.summary import summary

__all__ = ["main", "diagnose"]


def _stack(results):
    """The versions a run saw (the doctor itself imports no TensorFlow)."""
    for result in results.values():
        if result.get("stack"):
            return result["stack"]
    return {"tensorflow": None, "python": platform.python_version(), "keras": None}


def _other_findings(report, results, args):
    """The configuration findings of each run and the mode findings (their modules are the
    doctor's optional pieces: without them the report has the site findings only)."""
    out = []
    try:
        from npu_loss_scale.tools.doctor import (  # pylint: disable=import-outside-toplevel
            config_findings)
    except ImportError:
        config_findings = None
    if config_findings is not None and report["scaler"]["kind"] is not None:
        seen = {}
        for mode, run in report["runs"].items():
            checked = [s for s in run["steps"] if isinstance(s.get("skipped"), bool)]
            if not checked:   # no step, or no overflow check (enable_overflow_check=False)
                continue
            for finding in config_findings.config_findings(report["scaler"], checked, run=mode):
                same = seen.get((finding["kind"], finding["title"]))
                if same is not None:  # the other run found the same: one finding, both modes
                    same["modes"].append(mode)
                    continue
                finding.setdefault("modes", [mode])
                seen[(finding["kind"], finding["title"])] = finding
                out.append(finding)
    try:
        from npu_loss_scale.tools.doctor import (  # pylint: disable=import-outside-toplevel
            mode_findings)
    except ImportError:
        return out, None
    calls = [c for r in results.values() for c in r.get("sat_mode_calls", [])]
    mode = mode_findings.effective_mode(
        dict(os.environ), None, calls[-1]["mode"] if calls else None,
        call_site="%s line %s" % (calls[-1]["file"], calls[-1]["line"]) if calls else None)
    mode.update(precision_mode=args.precision_mode, saturate_every_op=True)
    out.extend(mode_findings.mode_findings(mode, report["runs"], report["front_end"],
                                           args.precision_mode,
                                           float32_script=_float32_script(report, results)))
    return out, mode


def _float32_script(report, results):
    """Whether the script computes in float32: known for the TF1 front ends, whose runs record
    whether the train op's graph holds a float16 op (None: not known)."""
    if any(r.get("float16_graph") for r in results.values()):
        return False
    if report["front_end"] in ("NPULossScaleOptimizer", "Estimator") and all(
            "float16_graph" in r for r in results.values()):
        return True
    return None


def _default_mode(results, args):
    calls = [c for r in results.values() for c in r.get("sat_mode_calls", [])]
    if calls:
        last = calls[-1]
        return {"effective": "inf_nan" if last["mode"] == 1 else "saturation",
                "source": "script", "source_detail": "set_device_sat_mode(%r) in %s line %s"
                % (last["mode"], last["file"], last["line"]),
                "precision_mode": args.precision_mode, "saturate_every_op": True}
    return {"effective": "saturation", "source": "default",
            "source_detail": "the device's default", "precision_mode": args.precision_mode,
            "saturate_every_op": True}


def diagnose(args, command, log=print):
    """Runs the doctor for parsed ``args``; returns ``(report, paths written)``."""
    script = args.script if not args.as_module else "-m " + args.script
    results = {}
    interrupted = False   # Ctrl-C ends all runs; a run's --timeout ends that run only
    ledger = Ledger()     # the checkpoints each run wrote: no later run resumes from them
    for mode in args.modes:
        if interrupted:
            break
        log("doctor: %s mode, up to %d steps ..." % (mode, args.steps))
        results[mode] = run_script(args, mode, name=mode, ledger=ledger)
        interrupted = results[mode].get("stopped_by") == "SIGINT"
        if results[mode].get("stopped_by") == "timeout":
            log("doctor: the %s run was stopped by --timeout after %d steps; going on"
                % (mode, len(results[mode].get("steps", []))))
    first = results[args.modes[0]]
    runs = {mode: _report.run_entry(result) for mode, result in results.items()}
    report = {
        "schema": _report.SCHEMA, "schema_version": _report.SCHEMA_VERSION,
        "package_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command, "script": script, "stack": _stack(results),
        "front_end": next((r["front_end"] for r in results.values() if r.get("front_end")),
                          None),
        "outcome": first["outcome"], "outcome_detail": first.get("outcome_detail", ""),
        "steps_requested": args.steps, "mode": None,
        "scaler": next((r["scaler"] for r in results.values()
                        if r.get("scaler", {}).get("kind")), {"kind": None, "settings": {}}),
        "runs": runs, "sites": _report.merge_sites(results), "findings": [],
    }
    report["findings"] = site_findings(report["sites"], runs)
    others, mode = _other_findings(report, results, args)
    report["findings"].extend(others)
    report["mode"] = mode or _default_mode(results, args)
    if not report["sites"] and first["outcome"] in ("completed", "step_limit") and \
            first.get("steps") and all(isinstance(s.get("skipped"), bool)  # all checked
                                       for s in first["steps"]) and \
            not any(run["skipped_steps"] for run in runs.values()):
        report["findings"].insert(0, {
            "id": "clean", "kind": "clean", "severity": "info",
            "title": "no overflow and no skipped step in %d steps" % len(first["steps"]),
            "evidence": "; ".join("%s mode: %d steps, none skipped" % (m, len(r["steps"]))
                                  for m, r in runs.items()),
            "site": None, "fix": None, "verified": None})
    if not args.no_verify and not interrupted:
        doctor_verify.verify(report, args, log, ledger)
    return report, _write(report, args.out, log)


def _write(report, out, log):
    paths = [os.path.join(out, "doctor.json")]
    _report.write_json(report, paths[0])
    try:
        from npu_loss_scale.tools.doctor import html  # pylint: disable=import-outside-toplevel
        html.write_html(report, os.path.join(out, "doctor.html"))
        paths.append(os.path.join(out, "doctor.html"))
    except ImportError as err:
        log("doctor: no doctor.html (%s)" % err)
    return paths


def main(argv=None, prog=doctor_args.PROG):
    """Entry point of ``npu-loss-scale doctor``; the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = doctor_args.parse(argv, prog)
    def log(text):
        print(text, file=sys.stderr)
    report, paths = diagnose(args, ["npu-loss-scale", "doctor"] + argv, log=log)
    print(summary(report))
    for path in paths:
        inside = os.path.abspath(path).startswith(os.path.join(os.getcwd(), ""))
        log("doctor: wrote %s" % (os.path.relpath(path) if inside else path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
