"""The doctor's fix verification: each fix that needs no edit of the script (of a finding that
is a warning or an error) is applied by a run of the same steps, and the finding's ``verified`` compares that run with the run it fixes.

``sat_mode`` compares with the run in the other mode (made now if ``--modes`` left it out);
``manager_setting`` re-runs with the manager's or scaler's constructor arguments replaced
(:mod:`npu_loss_scale.cli.doctor_run`); ``keep_fp32`` re-runs with Ascend's modify_mixlist JSON
through ``npu-emulate --modify-mixlist`` where the emulation takes it (else the fix is marked as
needing an edit: its ``keep_dtype_scope()`` code). Identical re-runs are made once."""
import json

from npu_loss_scale.cli.doctor_process import mixlist_supported, run_script
from npu_loss_scale.tools.doctor import report as _report

__all__ = ["verify"]


def _verified(mode, before, after, after_mode):
    def column(run, key):
        return [s[key] for s in run["steps"]]
    return {"runs_compared": mode, "after_mode": after_mode, "steps": len(before["steps"]),
            "after_steps": len(after["steps"]), "after_outcome": after["outcome"],
            "skipped_before": before["skipped_steps"], "skipped_after": after["skipped_steps"],
            "loss_before": column(before, "loss"), "loss_after": column(after, "loss"),
            "loss_scale_before": column(before, "loss_scale"),
            "loss_scale_after": column(after, "loss_scale")}


def _other(mode):
    return "inf_nan" if mode == "saturation" else "saturation"


def verify(report, args, log, ledger=None):
    """Fills ``verified`` of the report's findings whose fix applies without an edit, from the
    runs that recorded steps; ``ledger`` the runs' checkpoints (doctor_checkpoints.Ledger).
    Ctrl-C in a re-run ends the verification."""
    made = {}
    interrupted = []

    def run(mode, settings=None, mixlist=None):
        key = (mode, json.dumps(settings, sort_keys=True), json.dumps(mixlist, sort_keys=True))
        if key not in made:
            if settings is None and mixlist is None and mode in report["runs"]:
                made[key] = report["runs"][mode]
            else:
                name = "verify-%d-%s" % (len(made) + 1, mode)
                log("doctor: verifying a fix (%s mode, %s) ..." % (
                    mode, settings or mixlist or "as run"))
                result = run_script(args, mode, name, settings, mixlist, ledger=ledger,
                                    judge=False)
                interrupted.append(result.get("stopped_by") == "SIGINT")
                made[key] = _report.run_entry(result)
        return made[key]

    mixlist_ok = None
    for finding in report["findings"]:
        fix = finding.get("fix")
        if not fix or not fix.get("applies_without_edit") or finding["severity"] == "info":
            continue  # an info finding costs no step: nothing to verify
        if any(interrupted):
            break
        mode = (finding.get("modes") or list(report["runs"]))[0]
        if mode not in report["runs"] or not report["runs"][mode]["steps"]:
            continue   # no run to compare with (not made, or stopped before its first step)
        kind = fix["kind"]
        after_mode = mode
        if kind == "sat_mode":
            after_mode = _other(mode)
            after = run(after_mode)
        elif kind == "manager_setting" and fix.get("settings"):
            after = run(mode, settings=fix["settings"])
        elif kind == "keep_fp32" and fix.get("modify_mixlist"):
            mixlist_ok = mixlist_supported() if mixlist_ok is None else mixlist_ok
            if not mixlist_ok:
                fix["applies_without_edit"] = False
                fix["description"] += (" (this emulation does not take modify_mixlist: apply "
                                       "the edit)")
                continue
            after = run(mode, mixlist=fix["modify_mixlist"])
        else:
            continue
        finding["verified"] = _verified(mode, report["runs"][mode], after, after_mode)
