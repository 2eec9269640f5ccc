"""Run ``npu-loss-scale doctor`` over the sample of real Ascend scripts and count its findings.

Usage::

    python scripts/doctor_ascend_scripts.py CORPUS_DIR [--steps N] [--modes M] [--keep DIR]
                                            [the selection options of try_ascend_scripts.py]
    python scripts/doctor_ascend_scripts.py --summarize DIR [DIR ...]   # kept runs' summary

The scripts, their arguments, recipes, environment and interpreter are chosen exactly as
``scripts/try_ascend_scripts.py`` chooses them (it is imported: ``--sample``, ``--seed``,
``--list``, ``--only``, ``--python``, ``--jobs``, ``--recipes``); each script is run as
``python -m npu_loss_scale doctor --steps N --modes M --timeout T --out <dir>/doctor [--tf1]
script args`` instead of through ``npu-emulate``, ``--timeout`` being the doctor's limit per run
(the script's whole doctor, its re-runs included, gets ``RUNS_BOUND`` times that). Each
script's ``doctor.json`` stays in its numbered folder of ``--keep DIR`` (default: a temporary
folder, removed), so ``--summarize DIR`` prints the summary again from what a run left, also
from one stopped halfway; several folders are merged, a script run again in a later folder
counted once, with the later folder's report (a second pass over some of the scripts).

The summary: the scripts run; those whose doctor reached a loss-scale step (a run with at least
one step); per finding kind, the number of scripts with at least one such finding; per verified
fix, the script, the fix, the skipped steps before -> after, each of the steps its run made (a
script that stops after a number of applied steps makes fewer when fewer skip) and the steps
saved. ``--markdown`` prints the counts as Markdown tables too, and one row per script: what
each of the doctor's runs recorded (outcome, steps, skipped steps).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import try_ascend_scripts as trying  # noqa: E402  pylint: disable=wrong-import-position

RUNS_BOUND = 6   # the doctor's runs of one script: two modes and up to four verifying re-runs
RESULT = "result.json"


def doctor_launcher(steps, modes, timeout):
    """The ``launcher`` of :func:`try_ascend_scripts.run_one` running the doctor into the
    script's folder (a function of that folder)."""
    def launcher(work):
        return ["-m", "npu_loss_scale", "doctor", "--steps", str(steps), "--modes", modes,
                "--timeout", "%g" % timeout, "--out", os.path.join(work, "doctor")]
    return launcher


def load_reports(root):
    """[(script, doctor report or None, run result)] from the numbered folders of ``root``."""
    out = []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not (name.isdigit() and os.path.isfile(os.path.join(folder, RESULT))):
            continue
        with open(os.path.join(folder, RESULT), encoding="utf-8") as handle:
            result = json.load(handle)
        report = None
        path = os.path.join(folder, "doctor", "doctor.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                report = json.load(handle)
        out.append((result["script"], report, result))
    return out


def merge_reports(roots):
    """:func:`load_reports` of several folders, in order; a script found again in a later folder
    takes that folder's entry, in the place of its first one."""
    merged = {}
    for root in roots:
        for entry in load_reports(root):
            merged[entry[0]] = entry
    return list(merged.values())


def reached_step(report):
    """Did any of the doctor's runs record a loss-scale step?"""
    return bool(report) and any(run["steps"] for run in report["runs"].values())


def summarize(entries):
    """The counts of :func:`load_reports`' entries: a dict with ``scripts``, ``reached`` (script
    names), ``kinds`` ({finding kind: sorted script names}) and ``fixes`` (one row per verified
    fix: script, finding kind, fix kind, skipped before, after, over how many steps, saved)."""
    kinds, fixes, reached, no_report = {}, [], [], []
    for script, report, _ in entries:
        if report is None:
            no_report.append(script)
            continue
        if reached_step(report):
            reached.append(script)
        for finding in report["findings"]:
            kinds.setdefault(finding["kind"], set()).add(script)
            verified = finding.get("verified")
            if verified and finding.get("fix"):
                before, after = verified["skipped_before"], verified["skipped_after"]
                fixes.append({"script": script, "finding": finding["kind"],
                              "site": finding.get("site"), "fix": finding["fix"]["kind"],
                              "before": before, "after": after, "steps": verified["steps"],
                              "after_steps": verified.get("after_steps", verified["steps"]),
                              "saved": before - after})
    runs = [(script, {mode: run_cell(run) for mode, run in report["runs"].items()}
             if report else {}) for script, report, _ in entries]
    return {"scripts": len(entries), "reached": reached, "no_report": no_report,
            "kinds": {k: sorted(v) for k, v in sorted(kinds.items())}, "fixes": fixes,
            "runs": runs}


def run_cell(run):
    """One run of a report in a few words: outcome, steps, skipped steps, and why it stopped
    (``stopped, 1 step, 1 skipped: stopped after the --timeout of 600 s ...``; of a traceback,
    its last line)."""
    steps = run["steps"] if isinstance(run["steps"], int) else len(run["steps"])
    skipped = run.get("skipped_steps")
    if skipped is None and not isinstance(run["steps"], int):
        skipped = sum(bool(s.get("skipped")) for s in run["steps"])
    text = "%s, %d step%s" % (run.get("outcome", "?"), steps, "" if steps == 1 else "s")
    if skipped is not None:
        text += ", %d skipped" % skipped
    detail = (run.get("outcome_detail") or "").strip()
    if run.get("outcome") not in (None, "completed", "step_limit") and detail:
        text += ": " + detail.splitlines()[-1].strip()   # a traceback: its exception line
    return text


def print_summary(counts, markdown=False):
    print("scripts run through the doctor: %d; a loss-scale step reached: %d; no report: %d"
          % (counts["scripts"], len(counts["reached"]), len(counts["no_report"])))
    print("findings (scripts with at least one):")
    for kind, scripts in sorted(counts["kinds"].items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print("  %-24s %2d  %s" % (kind, len(scripts), ", ".join(_short(s) for s in scripts)))
    print("verified fixes (skipped of the steps run, before -> after):")
    for fix in counts["fixes"]:
        print("  %s: %s for %s%s: %d of %d -> %d of %d (saved %d)" % (
            _short(fix["script"]), fix["fix"], fix["finding"],
            " (%s)" % fix["site"] if fix["site"] else "", fix["before"], fix["steps"],
            fix["after"], fix["after_steps"], fix["saved"]))
    if not counts["fixes"]:
        print("  -")
    if markdown:
        print("\n| finding | scripts |\n| --- | --- |")
        for kind, scripts in sorted(counts["kinds"].items(), key=lambda kv: (-len(kv[1]), kv[0])):
            print("| `%s` | %d (%s) |" % (kind, len(scripts), ", ".join(_short(s) for s in scripts)))
        print("\n| script | finding | fix | skipped before -> after | saved |\n"
              "| --- | --- | --- | --- | --- |")
        for fix in counts["fixes"]:
            print("| %s | `%s`%s | `%s` | %d of %d -> %d of %d | %d |" % (
                _short(fix["script"]), fix["finding"],
                " `%s`" % fix["site"] if fix["site"] else "", fix["fix"], fix["before"],
                fix["steps"], fix["after"], fix["after_steps"], fix["saved"]))
        modes = sorted({m for _, cells in counts["runs"] for m in cells},
                       key=lambda m: (m != "saturation", m))
        print("\n| script | %s |\n| --- |%s" % (" | ".join("%s run" % m for m in modes),
                                                " --- |" * len(modes)))
        for script, cells in counts["runs"]:
            print("| %s | %s |" % (_short(script), " | ".join(
                cells.get(m, "no report" if not cells else "not run") for m in modes)))


def _short(script):
    """A script's model directory name (``.../BertBase_Google_ID0631_for_TensorFlow/x.py`` ->
    ``BertBase_Google_ID0631_for_TensorFlow``, ``.../ModelZoo_CTPN_TF_HARD/...`` ->
    ``ModelZoo_CTPN_TF_HARD``)."""
    parts = script.replace(os.sep, "/").split("/")
    for part in parts:
        if "_for_" in part or "_ID" in part or part.startswith("ModelZoo_"):
            return part
    return "/".join(parts[-2:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--summarize"]:
        if len(argv) < 2 or not all(os.path.isdir(folder) for folder in argv[1:]):
            parser.error("--summarize takes one or more folders kept by --keep; got %r"
                         % argv[1:])
        print_summary(summarize(merge_reports(argv[1:])), markdown=True)
        return 0
    trying.add_arguments(parser)
    parser.add_argument("--steps", type=int, default=10, help="the doctor's --steps (default 10)")
    parser.add_argument("--modes", default="saturation,inf_nan", help="the doctor's --modes")
    parser.add_argument("--markdown", action="store_true", help="the counts as Markdown too")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be an int >= 1; got %d" % args.steps)
    corpus, version, jobs = trying.selected_jobs(parser, args)
    if args.dry_run:
        return 0
    per_run = args.timeout
    args.timeout = per_run * RUNS_BOUND
    work_root = args.keep or tempfile.mkdtemp(prefix="doctor_ascend_")

    def report(i, result):
        with open(os.path.join(work_root, "%02d" % i, RESULT), "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1)
        path = os.path.join(work_root, "%02d" % i, "doctor", "doctor.json")
        print("%2d. %s: %s (%.0fs)%s" % (
            i + 1, result["script"], "doctor.json written" if os.path.isfile(path)
            else "no report: " + result["barrier"], result["seconds"],
            "" if result["barrier"] == "-" else "\n    " + result["barrier"]), flush=True)

    trying.run_jobs(args, corpus, version, jobs, work_root,
                    doctor_launcher(args.steps, args.modes, per_run), report)
    print()
    print_summary(summarize(load_reports(work_root)), markdown=args.markdown)
    if not args.keep:
        shutil.rmtree(work_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
