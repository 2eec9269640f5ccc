"""The overflow doctor from pytest: :func:`run_doctor` (and the ``npu_doctor`` fixture, which
writes into the test's ``tmp_path``) runs ``npu-loss-scale doctor`` on a script and returns its
report (schema version 1, a dict); :func:`assert_no_harmful_overflow` fails with the site, the
verdict and the fix of every harmful overflow in it.

Example::

    from npu_loss_scale.pytest_plugin import assert_no_harmful_overflow

    def test_no_overflow_reaches_the_update(npu_doctor):
        report = npu_doctor.run("train.py", "--batch_size=8", steps=10)
        assert_no_harmful_overflow(report)
"""
import os

__all__ = ["Doctor", "run_doctor", "assert_no_harmful_overflow"]


def _argv(script, script_args, steps, out, modes, precision_mode, verify, tf1, timeout,
          module):
    argv = ["--steps", str(steps), "--out", str(out)]
    if modes is not None:
        argv += ["--modes", ",".join([modes] if isinstance(modes, str) else modes)]
    if precision_mode is not None:
        argv += ["--precision-mode", precision_mode]
    if not verify:
        argv.append("--no-verify")
    if tf1:
        argv.append("--tf1")
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    return argv + (["-m"] if module else []) + [os.fspath(script)] + [str(a) for a in script_args]


def run_doctor(script, *script_args, out, steps=20, modes=None, precision_mode=None,
               verify=True, tf1=False, timeout=None, module=False):
    """Runs the doctor on ``script`` (a path, or a module name with ``module=True``) with its
    arguments ``script_args``, writing into the folder ``out``; returns the report (a dict,
    also written as ``out/doctor.json``). The options are the command's (``modes`` a list or
    one name; ``verify=False`` is ``--no-verify``); a bad one raises ``ValueError`` naming it."""
    from npu_loss_scale.cli import doctor, doctor_args  # pylint: disable=import-outside-toplevel
    argv = _argv(script, script_args, steps, out, modes, precision_mode, verify, tf1, timeout,
                 module)
    try:
        args = doctor_args.parse(argv)
    except SystemExit:
        raise ValueError("run_doctor: the doctor refused these options (its message is above): "
                         "%s" % " ".join(argv)) from None
    report, _ = doctor.diagnose(args, ["npu-loss-scale", "doctor"] + argv, log=lambda _: None)
    return report


class Doctor:  # pylint: disable=too-few-public-methods
    """The ``npu_doctor`` fixture: :meth:`run` is :func:`run_doctor` writing into a new folder
    of the test's ``tmp_path`` each call."""

    def __init__(self, folder):
        self.folder = str(folder)
        self.runs = 0

    def run(self, script, *script_args, **options):
        """:func:`run_doctor` with ``out`` in the test's temporary folder; the report."""
        self.runs += 1
        out = options.pop("out", os.path.join(self.folder, "doctor-%d" % self.runs))
        return run_doctor(script, *script_args, out=out, **options)


def _fix_text(finding):
    fix = finding.get("fix") or {}
    text = fix.get("description", "no fix given")
    if fix.get("modify_mixlist"):
        text += "; modify_mixlist %s" % (fix["modify_mixlist"],)
    if fix.get("settings"):
        text += "; settings %s" % (fix["settings"],)
    if fix.get("code"):
        text += "\n      " + fix["code"].replace("\n", "\n      ")
    return text


def assert_no_harmful_overflow(report, modes=None):
    """Fails when a site of ``report`` (the doctor's, a dict) is harmful in one of ``modes``
    (default: every mode the report ran), naming each such site, its verdict with the method and
    evidence, and its finding's fix. A report whose runs did not reach a step fails too: it
    proves nothing."""
    if not isinstance(report, dict) or report.get("schema") != "npu-loss-scale/doctor-report":
        raise TypeError("assert_no_harmful_overflow takes the doctor's report (a dict with "
                        "schema 'npu-loss-scale/doctor-report'); got %r" % (type(report),))
    runs = report.get("runs", {})
    modes = list(runs) if modes is None else ([modes] if isinstance(modes, str) else list(modes))
    unknown = [m for m in modes if m not in runs]
    if unknown:
        raise ValueError("modes %r: the report ran %s only" % (unknown, ", ".join(runs) or
                                                               "no mode"))
    empty = [m for m in modes if not runs[m].get("steps")]
    if empty:
        raise AssertionError("the doctor's %s run(s) ran no loss-scale step (outcome %s: %s)"
                             % (", ".join(empty), runs[empty[0]].get("outcome"),
                                report.get("outcome_detail", "")))
    fixes = {f.get("site"): f for f in report.get("findings", [])
             if f.get("kind") == "harmful_overflow"}
    problems = []
    for site in report.get("sites", []):
        for mode in modes:
            verdict = site.get("verdict", {}).get(mode)
            if verdict and verdict.get("verdict") == "harmful":
                finding = fixes.get(site["op_name"])
                feeding = ", ".join(site.get("fed_by", {}).get(mode, []))
                fix = _fix_text(finding) if finding else (
                    "that of the site feeding it (%s)" % feeding if feeding else "none given")
                problems.append("%s (%s, %s mode): harmful by %s: %s\n    fix: %s" % (
                    site["op_name"], site.get("direction"), mode, verdict.get("method"),
                    verdict.get("evidence"), fix))
    if problems:
        raise AssertionError("%d harmful overflow(s) in %s:\n  %s" % (
            len(problems), report.get("script"), "\n  ".join(problems)))
