"""The doctor's report, schema version 1 (docs/reference/doctor-report.md): its runs, its sites
merged over the runs, the JSON file. Pure Python: the runs' records come from the run processes.

Numbers that are not finite are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` so
the JSON stays standard; :func:`number` reads them back.
"""
import json
import math
import os

__all__ = ["SCHEMA", "SCHEMA_VERSION", "MODES", "OUTCOMES", "json_safe", "number", "run_entry",
           "merge_sites", "layer_of", "write_json", "read_json"]

SCHEMA = "npu-loss-scale/doctor-report"
SCHEMA_VERSION = 1
MODES = ("saturation", "inf_nan")
OUTCOMES = ("completed", "step_limit", "crashed", "stopped", "no_loss_scale_optimizer")


def json_safe(value):
    """``value`` with every non-finite float written as "inf", "-inf" or "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def number(value):
    """A report's number as a float ("inf", "-inf", "nan" included); None stays None."""
    if value is None:
        return None
    return float(value)


def run_entry(result):
    """One entry of the report's ``runs`` from a run process's result."""
    steps = []
    for step in result.get("steps", []):
        entry = {key: step.get(key) for key in
                 ("step", "loss_scale", "next_loss_scale", "skipped", "loss", "sites")}
        if step.get("max_safe_scale") is not None:
            entry["max_safe_scale"] = step["max_safe_scale"]
        steps.append(entry)
    skipped = sum(1 for s in steps if s["skipped"])
    return {"outcome": result.get("outcome"), "outcome_detail": result.get("outcome_detail", ""),
            "steps": steps, "skipped_steps": skipped,
            "applied_steps": sum(1 for s in steps if s["skipped"] is False)}


def layer_of(op_name):
    """The name scope of a site's op (``metric/Exp`` -> ``metric``), with a gradient's
    ``gradients/`` prefix and ``_grad`` suffix taken off; "" at the top level."""
    parts = op_name.split("/")
    if parts and (parts[0] == "gradients" or parts[0].startswith("gradients_")):
        parts = parts[1:]
    parts = [p[:-len("_grad")] if p.endswith("_grad") else p for p in parts[:-1]]
    return "/".join(p for p in parts if p) or ""


def _larger(a, b):
    if a is None:
        return b
    a_f, b_f = number(a), number(b)
    if math.isnan(a_f) or math.isnan(b_f):
        return "nan"
    return a if a_f >= b_f else b


def merge_sites(results):
    """The report's ``sites`` from the run results ``{mode: result}``: each op (and direction)
    once, with the steps it overflowed in per mode and its verdict per mode."""
    sites = {}
    for mode, result in results.items():
        verdicts = result.get("verdicts", {})
        for step in result.get("steps", []):
            for op_name in step.get("sites", []):
                for key, entry in verdicts.items():
                    if entry["op_name"] == op_name:
                        site = sites.setdefault(key, _new_site(entry))
                        site["steps"].setdefault(mode, [])
                        if step["step"] not in site["steps"][mode]:
                            site["steps"][mode].append(step["step"])
        for key, entry in verdicts.items():
            site = sites.setdefault(key, _new_site(entry))
            site["max_magnitude"] = _larger(site["max_magnitude"], entry.get("magnitude"))
            site["verdict"][mode] = {k: entry[k] for k in ("verdict", "method", "evidence")}
            if entry.get("rounded_op"):
                site["rounded_op"] = entry["rounded_op"]
            if entry.get("fed_by"):
                site["fed_by"][mode] = entry["fed_by"]
    return list(sites.values())


def _new_site(entry):
    return {"op_name": entry["op_name"], "op_type": entry.get("op_type"),
            "layer": layer_of(entry["op_name"]), "direction": entry["direction"],
            "dtype": entry["dtype"], "max_magnitude": None, "steps": {}, "verdict": {},
            "fed_by": {}}


def write_json(report, path):
    """Writes ``report`` to ``path`` (through a temporary file, so a reader never sees half)."""
    tmp = "%s.tmp" % path
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(json_safe(report), out, indent=1, allow_nan=False)
        out.write("\n")
    os.replace(tmp, path)


def read_json(path):
    """A report written by :func:`write_json`."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
