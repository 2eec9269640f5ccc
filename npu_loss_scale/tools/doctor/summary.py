"""The doctor's short terminal summary of a report (schema version 1)."""
import textwrap

__all__ = ["summary", "WIDTH"]

WIDTH = 100   # the summary's lines are wrapped to this many columns

_MARK = {"error": "ERROR", "warning": "WARN", "info": "info"}


def _run_line(mode, run):
    steps = run["steps"]
    scales = [s["loss_scale"] for s in steps if s["loss_scale"] is not None]
    span = "" if not scales else ", scale %s -> %s" % (_num(scales[0]), _num(
        steps[-1]["next_loss_scale"] if steps[-1]["next_loss_scale"] is not None
        else scales[-1]))
    unchecked = sum(1 for s in steps if s["skipped"] is None)
    return "  %-10s %s: %d steps, %d skipped, %d applied%s%s" % (
        mode, run["outcome"], len(steps), run["skipped_steps"], run["applied_steps"],
        ", %d not checked for overflow" % unchecked if unchecked else "", span)


def _num(value):
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return "%d" % value
    return str(value)


def _verified(finding):
    v = finding.get("verified")
    if not v:
        return ""
    return " [verified: %s skipped before, %s after, over %s steps]" % (
        v["skipped_before"], v["skipped_after"], v["steps"])


def summary(report):
    """The summary's lines as one string."""
    lines = ["npu-loss-scale doctor: %s (%s), %s" % (
        report["script"], report["front_end"] or "no loss-scale optimizer seen",
        report["outcome"])]
    if report.get("outcome_detail") and report["outcome"] not in ("step_limit", "completed"):
        lines.append("  " + report["outcome_detail"].strip().replace("\n", "\n  "))
    for mode, run in report["runs"].items():
        lines.append(_run_line(mode, run))
    harmful = sum(1 for s in report["sites"] if any(
        v["verdict"] == "harmful" for v in s["verdict"].values()))
    lines.append("  %d overflow site(s), %d harmful in some mode" % (len(report["sites"]),
                                                                      harmful))
    for finding in report["findings"]:
        lines.append(textwrap.fill(
            finding["title"] + _verified(finding), WIDTH, subsequent_indent=" " * 8,
            initial_indent="  %-5s " % _MARK.get(finding["severity"], finding["severity"])))
        if finding.get("fix"):
            lines.append(textwrap.fill(finding["fix"]["description"], WIDTH,
                                       initial_indent="        fix: ",
                                       subsequent_indent=" " * 13))
    return "\n".join(lines)
