"""What overflow localisation reports (:mod:`npu_loss_scale.device.localisation` makes them):
the record of one step's overflowed sites, the per-site observations of ``observe`` mode, and the
JSON-lines report file with one record a line.

A record's text (``describe``, ``summary``) writes dtypes short (``fp16``) and magnitudes with
three significant digits (``3.1e5``, ``inf``, ``nan``); its JSON form (``to_dict``) writes inf and
NaN as the strings ``"inf"`` and ``"nan"``, which :func:`read_report` turns back into floats.
"""
import json
import math
import os
import re
import threading

from npu_loss_scale._internal import env as _env
from npu_loss_scale._internal.report import of_record

_lock = threading.Lock()
_report = {"path": None, "file": None}


# -- public record types ---------------------------------------------------------------------------
class OverflowSite:
    """One op that overflowed (saturated) in a step.

    Attributes: ``op_name`` (str), ``direction`` ("forward" or "backward"), ``dtype`` (str, e.g.
    "float16"), ``magnitude`` (float: the largest absolute value before saturation; inf or nan
    possible), ``order`` (int, execution order within the step, 0 first), ``first`` (bool).
    """

    __slots__ = ("op_name", "direction", "dtype", "magnitude", "order", "first")

    def __init__(self, op_name, direction, dtype, magnitude, order=0, first=False):
        self.op_name = op_name
        self.direction = direction
        self.dtype = dtype
        self.magnitude = float(magnitude)
        self.order = int(order)
        self.first = bool(first)

    def describe(self):
        """``name (forward, fp16, 3.1e5)``."""
        return "%s (%s, %s, %s)" % (self.op_name, self.direction, _short_dtype(self.dtype),
                                    _format_magnitude(self.magnitude))

    def to_dict(self):
        return {"op_name": self.op_name, "direction": self.direction, "dtype": self.dtype,
                "magnitude": _json_number(self.magnitude), "order": self.order,
                "first": self.first}

    def __repr__(self):
        return "OverflowSite(%s, order=%d%s)" % (self.describe(), self.order,
                                                  ", first" if self.first else "")


class StepOverflowRecord:
    """The overflows of one step: ``step`` (int, the step's number in this process, counted at
    each register read of the loss-scale optimizer from 1), ``sites`` (list of
    :class:`OverflowSite` in execution order), ``first`` (the first site or None) and
    ``skipped`` (bool, or None if unknown)."""

    __slots__ = ("step", "sites", "first", "skipped")

    def __init__(self, step, sites, skipped=None):
        self.step = int(step)
        self.sites = list(sites)
        self.first = self.sites[0] if self.sites else None
        self.skipped = skipped

    def summary(self):
        """``first overflow at NAME (forward, fp16, 3.1e5), 12 sites``."""
        if self.first is None:
            return "overflow outside any saturation site (a non-finite value the gradient " \
                   "check found)"
        return "first overflow at %s, %d site%s" % (self.first.describe(), len(self.sites),
                                                    "" if len(self.sites) == 1 else "s")

    @property
    def step_report(self):
        """The record as a :class:`~npu_loss_scale.StepReport`: ``overflow`` (sites were found or
        the step was skipped), ``skipped``, ``step`` and ``sites`` (their number)."""
        return of_record(self)

    def to_dict(self):
        return {"step": self.step, "skipped": self.skipped,
                "first": None if self.first is None else self.first.to_dict(),
                "num_sites": len(self.sites), "sites": [s.to_dict() for s in self.sites]}

    def __repr__(self):
        return "StepOverflowRecord(step=%d, skipped=%r, %s)" % (self.step, self.skipped,
                                                                self.summary())


def _short_dtype(dtype):
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32",
            "float64": "fp64"}.get(dtype, dtype)


def _format_magnitude(value):
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", "%.3g" % value)   # 3.1e5, 2e-3, 65504


def _json_number(value):
    return value if math.isfinite(value) else ("nan" if math.isnan(value) else "inf")


class SiteObservation:  # pylint: disable=too-few-public-methods
    """The largest magnitude one site showed over the observed steps."""

    __slots__ = ("site", "op_name", "direction", "dtype", "max_magnitude", "steps", "overflows")

    def __init__(self, site, op_name, direction, dtype, max_magnitude, steps, overflows):
        self.site, self.op_name, self.direction, self.dtype = site, op_name, direction, dtype
        self.max_magnitude, self.steps, self.overflows = max_magnitude, steps, overflows

    def __repr__(self):
        return "SiteObservation(%s, %s, %s, max %s over %d steps, %d overflowed)" % (
            self.op_name, self.direction, self.dtype, _format_magnitude(self.max_magnitude),
            self.steps, self.overflows)


# -- JSON-lines report -------------------------------------------------------------------------------
def set_report_path(path):
    """Appends one JSON line per record to ``path`` from now on (None stops). The file is
    created (truncated) now; each line is flushed as it is written."""
    with _lock:
        if _report["file"] is not None:
            _report["file"].close()
        _report["path"], _report["file"] = None, None
        if path is None:
            return
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError("path must be a file path (str) or None; got %r" % (path,))
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        _report["file"] = open(path, "w", encoding="utf-8")  # pylint: disable=consider-using-with
        _report["path"] = str(path)


def report_path():
    return _report["path"]


def append(record):
    """Writes ``record`` as one JSON line to the report file, if one is being written."""
    with _lock:
        handle = _report["file"]
        if handle is None:
            return
        handle.write(json.dumps(record.to_dict()) + "\n")
        handle.flush()


def read_report(path):
    """The records of a JSON-lines report, as dicts (magnitudes as floats)."""
    out = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                entry = json.loads(line)
                for site in entry["sites"] + ([entry["first"]] if entry["first"] else []):
                    site["magnitude"] = float(site["magnitude"])
                out.append(entry)
    return out


# -- report files per rank ------------------------------------------------------------------------
def per_rank(path):
    """``path`` with ``.rank<RANK_ID>`` before its extension in a rank of several (``--ranks N``
    sets RANK_ID and RANK_SIZE), so the ranks do not write one file."""
    if path is None or _env.rank_size() <= 1:
        return path
    root, ext = os.path.splitext(path)
    return "%s.rank%d%s" % (root, _env.rank_id(), ext)


__all__ = ["OverflowSite", "StepOverflowRecord", "SiteObservation", "append", "per_rank",
           "read_report", "report_path", "set_report_path"]
