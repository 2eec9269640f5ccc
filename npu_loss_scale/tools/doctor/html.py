"""The doctor's report as one self-contained HTML page: :func:`write_html`.

The page is the Jinja2 template ``templates/report.html.j2`` filled from the report (schema
``npu-loss-scale/doctor-report``, version 1) with its plots inlined as SVG (:mod:`.html_plots`):
no file beside it, no script, no font or style sheet fetched, so it opens offline and makes no
request. Jinja2 escapes every text of the report. Missing optional keys show as "unknown" or
leave their section out; keys the page does not know are ignored.

Jinja2 and matplotlib are optional (``pip install npu-loss-scale[doctor]``) and imported only
when a page is written.
"""
import json
import math
import os
import re

from . import html_plots

__all__ = ["write_html", "SCHEMA", "SCHEMA_VERSION"]

SCHEMA = "npu-loss-scale/doctor-report"
SCHEMA_VERSION = 1
TEMPLATE = "report.html.j2"
MODE_ORDER = ("saturation", "inf_nan")
MODE_LABEL = {"saturation": "saturation mode", "inf_nan": "INF/NaN mode"}
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def _extra_missing(error):
    return ImportError("the doctor's HTML page needs Jinja2 and matplotlib, which are not installed "
                       "(%s): pip install 'npu-loss-scale[doctor]'" % error)


def _number(value):
    """A report number as a float: ints and floats as they are, the strings "inf", "-inf" and
    "nan" as those floats, anything else (null, text) as None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("inf", "+inf", "-inf", "nan"):
        return float(value.strip().lower())
    return None


def _dict(value):
    return value if isinstance(value, dict) else {}


def _list(value):
    return value if isinstance(value, list) else []


def format_number(value):
    """A number for reading: powers of two from 2**10 up as ``2^k (n)``, others in short form;
    inf/NaN and text as written; None as "unknown"."""
    if value is None:
        return "unknown"
    number = _number(value)
    if number is None:
        return str(value)
    if not math.isfinite(number):
        return "NaN" if math.isnan(number) else ("inf" if number > 0 else "-inf")
    if number >= 1024 and math.log2(number).is_integer():
        return "2^%d (%s)" % (math.log2(number), format(number, ".12g"))
    if number == int(number) and abs(number) < 1e15:
        return str(int(number))
    return format(number, ".4g")


def format_steps(steps):
    """Step numbers as ranges: [1, 2, 3, 5] -> "1-3, 5" (with an en dash)."""
    parts = []
    for step in sorted(set(steps)):
        if parts and parts[-1][1] == step - 1:
            parts[-1][1] = step
        else:
            parts.append([step, step])
    return ", ".join(str(a) if a == b else "%d\u2013%d" % (a, b) for a, b in parts)


def _mode_label(mode):
    return MODE_LABEL.get(mode, str(mode))


def _run_view(mode, run):
    steps = [_dict(step) for step in _list(run.get("steps"))]
    numbers = [step.get("step") for step in steps]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        numbers = list(range(1, len(steps) + 1))
    skipped = [bool(step.get("skipped")) for step in steps]
    scales = [_number(step.get("loss_scale")) for step in steps]
    count_skipped = run.get("skipped_steps")
    count_applied = run.get("applied_steps")
    return {
        "mode": mode, "label": _mode_label(mode), "outcome": run.get("outcome"),
        "steps": numbers, "skipped": skipped, "scales": scales,
        "losses": [_number(step.get("loss")) for step in steps],
        "sites": [[str(s) for s in _list(step.get("sites"))] for step in steps],
        "skipped_steps": count_skipped if isinstance(count_skipped, int) else sum(skipped),
        "applied_steps": (count_applied if isinstance(count_applied, int)
                          else len(steps) - sum(skipped)),
        "first_applied": next((n for n, skip in zip(numbers, skipped) if not skip), None),
        "first_scale": next((s for s in scales if s is not None), None),
        "last_scale": next((s for s in reversed(scales) if s is not None), None),
    }


def _modes(report, sites):
    """The modes of the report in a stable order: those of ``runs``, then any only a site names."""
    seen = [m for m in MODE_ORDER if m in _dict(report.get("runs"))]
    seen += sorted(m for m in _dict(report.get("runs")) if m not in seen)
    for site in sites:
        for mode in list(_dict(site.get("verdict"))) + list(_dict(site.get("steps"))):
            if mode not in seen:
                seen.append(mode)
    return seen


def _site_view(site, modes, run_modes):
    verdicts = _dict(site.get("verdict"))
    steps = _dict(site.get("steps"))
    op_name = str(site.get("op_name") or "unknown op")
    return {
        "op_name": op_name, "op_type": site.get("op_type"),
        "layer": str(site.get("layer") or (op_name.rsplit("/", 1)[0] if "/" in op_name else op_name)),
        "direction": site.get("direction"), "dtype": site.get("dtype"),
        "max_magnitude": format_number(site.get("max_magnitude")) if "max_magnitude" in site else None,
        "per_mode": [{"mode": mode, "label": _mode_label(mode),
                      "steps": [s for s in _list(steps.get(mode)) if isinstance(s, int)],
                      "verdict": _dict(verdicts.get(mode)).get("verdict"),
                      "method": _dict(verdicts.get(mode)).get("method"),
                      "evidence": _dict(verdicts.get(mode)).get("evidence"),
                      "was_run": mode in verdicts or mode in steps or mode in run_modes}
                     for mode in modes],
    }


def _site_counts(mode, run, sites):
    """{(layer, step): sites overflowed} for one mode, from the sites' step lists and the run's
    per-step site names (a name without a site entry counts under its name scope)."""
    layer_of = {site["op_name"]: site["layer"] for site in sites}
    found = set()
    for site in sites:
        for entry in site["per_mode"]:
            if entry["mode"] == mode:
                found.update((site["op_name"], step) for step in entry["steps"])
    if run is not None:
        for step, names in zip(run["steps"], run["sites"]):
            found.update((name, step) for name in names)
    counts = {}
    for name, step in found:
        layer = layer_of.get(name, name.rsplit("/", 1)[0] if "/" in name else name)
        counts[(layer, step)] = counts.get((layer, step), 0) + 1
    return counts


def _sites_plot(mode, run, sites):
    counts = _site_counts(mode, run, sites)
    if not counts:
        return None
    layers = []
    for layer, _ in sorted(counts, key=lambda key: (key[1], key[0])):
        if layer not in layers:
            layers.append(layer)
    last = max(max(step for _, step in counts), max(run["steps"]) if run and run["steps"] else 1)
    steps = list(range(1, last + 1))
    plot_id = "plot-sites-%s" % re.sub(r"[^A-Za-z0-9_-]", "-", mode)
    return {"id": plot_id, "mode": mode, "label": _mode_label(mode),
            "title": "Overflow sites by layer and step, %s" % _mode_label(mode),
            "alt": "Grid of %d layers by %d steps in %s: %s." % (
                len(layers), len(steps), _mode_label(mode),
                "; ".join("%s overflowed at %d of the steps" % (
                    layer, sum(1 for (l, _) in counts if l == layer)) for layer in layers)),
            "svg": html_plots.sites_svg(layers, steps, counts, mode, plot_id)}


def _finding_view(finding, index):
    fix = finding.get("fix")
    fix = _dict(fix) if fix is not None else None
    verified = finding.get("verified")
    verified = _dict(verified) if verified is not None else None
    view = {"id": str(finding.get("id") or "finding-%d" % (index + 1)),
            "anchor": "finding-%d" % (index + 1),
            "kind": finding.get("kind"), "severity": str(finding.get("severity") or "info"),
            "title": finding.get("title") or finding.get("kind") or "finding",
            "evidence": finding.get("evidence"), "site": finding.get("site"),
            "fix": None, "verified": None}
    if fix is not None:
        view["fix"] = {
            "kind": fix.get("kind"), "description": fix.get("description"),
            "applies_without_edit": fix.get("applies_without_edit"),
            "modify_mixlist": (json.dumps(fix["modify_mixlist"], indent=2)
                               if fix.get("modify_mixlist") is not None else None),
            "settings": [(str(k), format_number(v)) for k, v in _dict(fix.get("settings")).items()],
            "code": fix.get("code") if isinstance(fix.get("code"), str) else None}
    if verified is not None:
        before = [_number(v) for v in _list(verified.get("loss_before"))]
        after = [_number(v) for v in _list(verified.get("loss_after"))]
        scale_before = [_number(v) for v in _list(verified.get("loss_scale_before"))]
        scale_after = [_number(v) for v in _list(verified.get("loss_scale_after"))]
        count = verified.get("steps")
        longest = max(len(before), len(after), len(scale_before), len(scale_after))
        steps = list(range(1, (count if isinstance(count, int) else longest) + 1))
        plot_id = "plot-fix-%d" % (index + 1)
        svg = html_plots.fix_effect_svg(steps, before, after, scale_before, scale_after, plot_id)
        view["verified"] = {
            "runs_compared": verified.get("runs_compared"), "steps": count,
            "skipped_before": verified.get("skipped_before"),
            "skipped_after": verified.get("skipped_after"),
            "plot": None if svg is None else {
                "id": plot_id, "svg": svg,
                "title": "Before and after the fix: %s" % view["title"],
                "alt": "Loss and loss scale per step before and after the fix; skipped steps "
                       "%s before, %s after." % (verified.get("skipped_before", "unknown"),
                                                 verified.get("skipped_after", "unknown"))}}
    return view


def _context(report):
    """What the template reads, with every optional key given a value."""
    runs_in = _dict(report.get("runs"))
    sites_in = [_dict(site) for site in _list(report.get("sites"))]
    modes = _modes(report, sites_in)
    runs = [_run_view(mode, _dict(runs_in[mode])) for mode in modes if mode in runs_in]
    sites = [_site_view(site, modes, runs_in) for site in sites_in]
    run_of = {run["mode"]: run for run in runs}
    findings = [_finding_view(_dict(f), i) for i, f in enumerate(_list(report.get("findings")))]
    findings.sort(key=lambda f: SEVERITY_ORDER.get(f["severity"], len(SEVERITY_ORDER)))
    stepped = [run for run in runs if run["steps"]]
    loss_scale_plot = None
    if stepped:
        loss_scale_plot = {
            "id": "plot-loss-scale",
            "title": "Loss scale%s per step, each saturation mode's run" % (
                " and loss" if any(v is not None for r in stepped for v in r["losses"]) else ""),
            "alt": "Loss scale per step. " + " ".join(
                "%s: %d steps, %d skipped, scale %s at the first step and %s at the last." % (
                    run["label"], len(run["steps"]), run["skipped_steps"],
                    format_number(run["first_scale"]), format_number(run["last_scale"]))
                for run in stepped),
            "svg": html_plots.loss_scale_svg(
                [(r["mode"], r["steps"], r["scales"], r["skipped"], r["losses"]) for r in stepped],
                "plot-loss-scale")}
    site_plots = [plot for plot in (_sites_plot(mode, run_of.get(mode), sites)
                                    for mode in modes) if plot is not None]
    command = report.get("command")
    stack = _dict(report.get("stack"))
    scaler = _dict(report.get("scaler"))
    return {
        "modes": [(m, _mode_label(m)) for m in modes],
        "script": report.get("script"),
        "command": " ".join(str(part) for part in command) if isinstance(command, list) else command,
        "stack": [(name, stack[name]) for name in ("tensorflow", "python", "keras")
                  if stack.get(name) is not None],
        "outcome": report.get("outcome"), "outcome_detail": report.get("outcome_detail"),
        "front_end": report.get("front_end"), "steps_requested": report.get("steps_requested"),
        "mode": {key: _dict(report.get("mode")).get(key) for key in (
            "effective", "source", "source_detail", "precision_mode", "saturate_every_op")},
        "package_version": report.get("package_version"), "created": report.get("created"),
        "scaler_kind": scaler.get("kind"),
        "scaler_settings": [(str(k), format_number(v))
                            for k, v in _dict(scaler.get("settings")).items()],
        "runs": runs, "sites": sites, "findings": findings,
        "severity_counts": [(severity, sum(1 for f in findings if f["severity"] == severity))
                            for severity in sorted({f["severity"] for f in findings},
                                                   key=lambda s: SEVERITY_ORDER.get(s, 9))],
        "loss_scale_plot": loss_scale_plot, "any_steps": bool(stepped), "site_plots": site_plots,
        "schema_version": report.get("schema_version"), "schema_version_read": SCHEMA_VERSION,
    }


def _check(report, path):
    if not isinstance(report, dict):
        raise TypeError("report must be a dict (the doctor's JSON report, schema %r), got %s"
                        % (SCHEMA, type(report).__name__))
    schema = report.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise ValueError("report['schema'] is %r; write_html reads reports of schema %r"
                         % (schema, SCHEMA))
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError("path must be a file path (str or os.PathLike), got %r" % (path,))


def render_html(report):
    """The page of ``report`` as text (what :func:`write_html` writes)."""
    _check(report, "")
    try:
        import jinja2  # pylint: disable=import-outside-toplevel
        import matplotlib  # pylint: disable=import-outside-toplevel,unused-import
    except ImportError as error:
        raise _extra_missing(error) from None
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__), "templates")),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    environment.filters["number"] = format_number
    environment.filters["steps"] = format_steps
    return environment.get_template(TEMPLATE).render(**_context(report))


def write_html(report, path):
    """Write the doctor's ``report`` (a dict of the JSON schema ``npu-loss-scale/doctor-report``,
    version 1) to ``path`` as one self-contained HTML page: the run's header, the loss scale per
    step of each saturation mode's run with its skipped steps marked, the overflow sites by layer
    and step, the sites' verdicts per mode and the findings with their fixes and verified effect.

    Raises ImportError naming the ``doctor`` extra when Jinja2 or matplotlib is missing,
    TypeError for a report that is not a dict or a path that is not one, ValueError for another
    schema."""
    _check(report, path)
    page = render_html(report)
    with open(path, "w", encoding="utf-8") as out:
        out.write(page)
