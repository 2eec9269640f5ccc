"""The doctor's findings about overflow sites: one per site and verdict (a site benign in one
mode and harmful in the other gets both), each with its fix.

Which fix: a benign site that skipped steps in saturation mode is cured by INF/NaN mode (the
device then judges the gradients' values, which the site does not reach: ``sat_mode``, checked
against the run in that mode); a benign site that skipped nothing only needs tidying
(``code_edit``). A harmful gradient (backward) site is a loss scale too large for it: the
largest scale a step of the run applied at (``manager_setting``). A harmful forward site whose
op has no finite value at its input (``Log`` of zero padding, a division by zero: ``inf`` or
``nan`` in any precision) needs the input masked before the op (``code_edit``); any other
harmful forward site fits in float32 (``keep_fp32``: Ascend's ``modify_mixlist`` JSON, and the
``keep_dtype_scope()`` edit as its code)."""
from npu_loss_scale.device.precision_lists import ascend_op_type
from npu_loss_scale.tools.advisor import layer_of
from npu_loss_scale.tools.doctor.report import MODES, number

__all__ = ["site_findings", "DOMAIN_OPS"]

#: Ops whose overflow comes from their input's domain (log of zero, a division by zero, the
#: root of a negative): float32 overflows there as well.
DOMAIN_OPS = frozenset(["Log", "Log1p", "Reciprocal", "Inv", "RealDiv", "Div", "DivNoNan",
                        "Rsqrt", "Sqrt", "Pow", "Xlogy", "Xdivy", "Digamma", "Lgamma"])


def _skipped_with(run, op_name):
    return [s["step"] for s in run["steps"] if s["skipped"] and op_name in s["sites"]]


def _applied_scales(run):
    return [number(s["loss_scale"]) for s in run["steps"]
            if s["skipped"] is False and s["loss_scale"] is not None]


def _fix(kind, description, without_edit, mixlist=None, settings=None, code=None):
    return {"kind": kind, "description": description, "applies_without_edit": without_edit,
            "modify_mixlist": mixlist, "settings": settings, "code": code}


def _forward_op(site):
    """The forward op a site belongs to (a gradient's op names its forward op)."""
    return layer_of(site["op_name"])


def _float32_code(site):
    op = _forward_op(site)
    return ("-  y = %s(x16)\n+  y = tf.cast(%s(tf.cast(x16, tf.float32)), tf.float16)"
            "   # %s in float32, or computed outside the train step" % (op, op, op))


def _mask_code(site):
    op = _forward_op(site)
    return ("-  y = tf.where(mask, %s(x), tf.zeros_like(x))\n"
            "+  y = tf.where(mask, %s(tf.where(mask, x, tf.ones_like(x))), tf.zeros_like(x))"
            "   # mask before %s, not after" % (op, op, op))


def _edit(site):
    """The edit that removes the site's overflow: mask its input (a domain op), or float32."""
    if site.get("op_type") in DOMAIN_OPS:
        return _fix("code_edit", "mask the input of %s before the op: its value there is inf "
                    "or NaN in any precision" % _forward_op(site), False, code=_mask_code(site))
    return _fix("code_edit", "compute %s in float32 (or outside the train step)"
                % _forward_op(site), False, code=_float32_code(site))


def _keep_fp32(site):
    """Keep the op in float32; a site of precision_mode's rounding names the op it rounds."""
    op = site.get("rounded_op") or {"op_name": _forward_op(site), "op_type": site.get("op_type")}
    op_type = ascend_op_type(op["op_type"] or op["op_name"].rsplit("/", 1)[-1])  # MatMulV2
    code = ("+  from npu_bridge.estimator.npu import npu_scope\n"
            "+  with npu_scope.keep_dtype_scope():\n"
            "       ...   # build %s here: it stays in float32" % op["op_name"])
    return _fix("keep_fp32", "keep %s (%s) in float32: add %s to precision_mode's black list "
                "with modify_mixlist, or build it under npu_scope.keep_dtype_scope()"
                % (op["op_name"], op["op_type"], op_type), True,
                mixlist={"black-list": {"to-add": [op_type]}}, code=code)


def _one(site, mode, runs, verdict, feeds):
    run = runs[mode]
    skipped = _skipped_with(run, site["op_name"])
    seen = site["steps"].get(mode, [])
    evidence = "%s mode: %s overflowed (%s, %s, max %s) in %d step(s), %d of them skipped; %s" % (
        mode, site["op_name"], site["direction"], site["dtype"], site["max_magnitude"],
        len(seen), len(skipped), verdict["evidence"])
    if feeds:
        evidence += "; it feeds %d later site(s) of its steps: %s" % (len(feeds),
                                                                    ", ".join(sorted(feeds)))
    name = site["op_name"] + ("" if site["direction"] == "forward" else "/backward")
    other = [v["verdict"] for m, v in site["verdict"].items() if m != mode]
    if verdict["verdict"] == "benign":
        kind, fid = "benign_overflow", "benign-overflow/%s" % name
        title = "%s overflows but cannot change the update (%s mode)" % (site["op_name"], mode)
        severity = "warning" if skipped else "info"
        fix = _edit(site)
        if skipped and mode == "saturation" and "harmful" not in other:
            fix = _fix("sat_mode", "run in INF/NaN mode (set_device_sat_mode(1)): the device then "
                       "judges the gradients' values, which %s does not reach; or edit: %s"
                       % (site["op_name"], fix["description"]), True, code=fix["code"])
    else:
        kind, fid, severity = "harmful_overflow", "harmful-overflow/%s" % name, "error"
        title = "%s overflows into the update (%s mode)" % (site["op_name"], mode)
        scales = _applied_scales(run)
        if site["direction"] == "backward" and scales and site.get("op_type") not in DOMAIN_OPS:
            fix = _fix("manager_setting", "start the loss scale at %g, the largest scale a step "
                       "of this run was applied at" % max(scales), True,
                       settings={"init_loss_scale": max(scales)})
        elif site.get("op_type") in DOMAIN_OPS:
            fix = _edit(site)
        else:
            fix = _keep_fp32(site)
    return {"id": fid, "kind": kind, "severity": severity, "title": title, "evidence": evidence,
            "site": site["op_name"], "modes": [mode], "fix": fix, "verified": None}


def _consequences(sites):
    """mode -> root op name -> the op names of the later sites it feeds."""
    out = {}
    for site in sites:
        for mode, roots in site.get("fed_by", {}).items():
            for root in roots:
                out.setdefault(mode, {}).setdefault(root, set()).add(site["op_name"])
    return out


def site_findings(sites, runs):
    """The findings of ``sites`` (the report's) over ``runs`` (the report's ``runs``): one per
    site and verdict; a site fed by an earlier overflowed site of its step is that site's
    consequence and is named in its finding instead of getting one."""
    out = []
    feeds = _consequences(sites)
    for site in sites:
        by_verdict = {}
        for mode, verdict in site["verdict"].items():
            if verdict["verdict"] in ("benign", "harmful") and not site["fed_by"].get(mode):
                by_verdict.setdefault(verdict["verdict"], []).append((mode, verdict))
        for entries in by_verdict.values():
            entries.sort(key=lambda entry: MODES.index(entry[0]))
            modes = [m for m, _ in entries]
            # the first mode's finding (saturation, the device's default) stands for both
            finding = _one(site, modes[0], runs, entries[0][1],
                           feeds.get(modes[0], {}).get(site["op_name"], ()))
            if len(modes) > 1:
                finding["modes"] = modes
                finding["title"] = finding["title"].replace(
                    "(%s mode)" % modes[0], "(%s modes)" % " and ".join(modes))
                finding["evidence"] += "; the same in %s mode" % ", ".join(modes[1:])
            out.append(finding)
    return out
