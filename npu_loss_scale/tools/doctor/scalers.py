"""The loss-scale configurations the doctor reads (the report's ``"scaler"`` object) and their
rules run forward.

Each kind names its class, the class's constructor settings under their own names with the
class's defaults, which setting is the starting scale, which is the growth interval, and the
lowest scale the class can reach. :meth:`Scaler.twin` runs the class's own rule through the
package's pure-Python twins (:mod:`npu_loss_scale.scaling.reference`), so that the doctor's
predictions follow the very rules the tests hold the TensorFlow classes to. Pure Python and
NumPy: no TensorFlow.
"""
import math

import numpy as np

from npu_loss_scale.scaling.reference.ascend import (ExponentialUpdateRule, FixedRule,
                                                     growth_threshold)
from npu_loss_scale.scaling.reference.megatron import DynamicScalerTwin
from npu_loss_scale.scaling.reference.torch import MIN_SCALE, GradScalerTwin

__all__ = ["KINDS", "Scaler", "from_report", "number"]

_REQUIRED = object()

# kind: (class, {setting: default}, starting-scale setting, growth-interval setting)
KINDS = {
    "ascend_exponential": ("ExponentialUpdateLossScaleManager", {
        "init_loss_scale": _REQUIRED, "incr_every_n_steps": _REQUIRED,
        "decr_every_n_nan_or_inf": 2, "incr_ratio": 2.0, "decr_ratio": 0.8},
        "init_loss_scale", "incr_every_n_steps"),
    "ascend_fixed": ("FixedLossScaleManager", {"loss_scale": _REQUIRED},
                     "loss_scale", None),
    "megatron_dynamic": ("DynamicGradScaler", {
        "initial_scale": _REQUIRED, "min_scale": _REQUIRED, "growth_factor": _REQUIRED,
        "backoff_factor": _REQUIRED, "growth_interval": _REQUIRED, "hysteresis": _REQUIRED,
        "max_scale": None, "consecutive_hysteresis": False},
        "initial_scale", "growth_interval"),
    "megatron_constant": ("ConstantGradScaler", {"initial_scale": _REQUIRED},
                          "initial_scale", None),
    "grad_scaler": ("GradScaler", {
        "init_scale": 2.0 ** 16, "growth_factor": 2.0, "backoff_factor": 0.5,
        "growth_interval": 2000, "enabled": True},
        "init_scale", "growth_interval"),
    "keras": ("NpuLossScaleOptimizer", {
        "dynamic": True, "initial_scale": None, "dynamic_growth_steps": None},
        "initial_scale", "dynamic_growth_steps"),
}
KERAS_INITIAL_SCALE = 2.0 ** 15     # Keras's own defaults, which the package's class keeps
KERAS_GROWTH_STEPS = 2000
_BOOLEAN = ("consecutive_hysteresis", "enabled", "dynamic")
_INTEGER = ("incr_every_n_steps", "decr_every_n_nan_or_inf", "growth_interval", "hysteresis",
            "dynamic_growth_steps")


def number(value, name):
    """``value`` as a float: a number, or the report's strings "inf", "-inf", "nan"."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError("%s must be a number (or the string 'inf', '-inf' or 'nan'); got %r"
                         % (name, value))
    return float(value)


class Scaler:  # pylint: disable=too-many-instance-attributes
    """One configuration: ``kind``, ``class_name``, ``settings`` (every setting of the class,
    defaults filled), ``scale_setting``/``growth_setting`` (the names of the starting scale and
    the growth interval; the latter None for a fixed scale), ``initial``, ``growth_interval``,
    ``minimum`` (the lowest scale the rule reaches) and ``fixed``."""

    def __init__(self, kind, settings):
        self.kind = kind
        self.class_name, defaults, self.scale_setting, growth = KINDS[kind]
        self.settings = dict(defaults)
        for name, value in settings.items():
            if name in defaults:          # other keys (backend, name, ...) do not move the scale
                self.settings[name] = value
        for name, value in self.settings.items():
            if value is _REQUIRED:
                raise ValueError("scaler settings of kind %r lack %r (%s takes it without a "
                                 "default)" % (kind, name, self.class_name))
            self.settings[name] = _checked(kind, name, value)
        if kind == "keras":
            if self.settings["initial_scale"] is None:
                self.settings["initial_scale"] = KERAS_INITIAL_SCALE
            if self.settings["dynamic_growth_steps"] is None and self.settings["dynamic"]:
                self.settings["dynamic_growth_steps"] = KERAS_GROWTH_STEPS
        self.fixed = growth is None or (kind == "keras" and not self.settings["dynamic"])
        self.growth_setting = None if self.fixed else growth
        self.initial = float(np.float32(self.settings[self.scale_setting]))
        self.growth_interval = None if self.fixed else self.settings[growth]
        if self.fixed:
            self.minimum = self.initial
        elif kind == "megatron_dynamic":
            self.minimum = float(np.float32(self.settings["min_scale"]))
        elif kind == "grad_scaler":
            self.minimum = float(MIN_SCALE)
        else:
            self.minimum = 1.0             # Ascend's max(1, ...) and Keras's floor

    @property
    def enabled(self):
        """False for a ``GradScaler(enabled=False)``: nothing is scaled, nothing skipped."""
        return self.settings.get("enabled", True)

    def twin(self):
        """A fresh copy of the rule: ``.scale`` (the scale the next step uses) and
        ``.step(finite)``."""
        return _Twin(self)

    def can_grow_from(self, scale):
        """Whether the rule can grow ``scale`` at all (its ceiling not reached)."""
        if self.fixed:
            return False
        s = self.settings
        if self.kind == "ascend_exponential":
            return bool(np.float32(scale) < growth_threshold(s["incr_ratio"]))
        if self.kind == "megatron_dynamic":
            top = np.finfo(np.float32).max if s["max_scale"] is None else s["max_scale"]
            return bool(np.float32(scale) < np.float32(top))
        factor = s.get("growth_factor", 2.0)
        with np.errstate(over="ignore"):
            return bool(np.isfinite(np.float32(np.float32(scale) * np.float32(factor))))

    def overflows_before_applied(self, finite_at, limit=100000):
        """How many steps the rule skips from its start before the first step ``finite_at(scale)``
        calls finite (None: none within ``limit`` steps, the scale never gets there)."""
        twin = self.twin()
        for count in range(limit):
            if finite_at(twin.scale):
                return count
            if twin.scale <= self.minimum * (1 + 1e-6):
                return None     # at the lowest scale the rule reaches, and still too high
            twin.step(False)
        return None


class _Twin:
    """The kind's twin behind one interface (``scale``, ``step(finite)``)."""

    def __init__(self, scaler):
        s, self._floor = scaler.settings, None
        if scaler.fixed:
            self._rule = FixedRule(scaler.initial)
        elif scaler.kind == "ascend_exponential":
            self._rule = ExponentialUpdateRule(
                s["init_loss_scale"], s["incr_every_n_steps"], s["decr_every_n_nan_or_inf"],
                s["incr_ratio"], s["decr_ratio"])
        elif scaler.kind == "megatron_dynamic":
            self._rule = DynamicScalerTwin(
                s["initial_scale"], s["min_scale"], s["growth_factor"], s["backoff_factor"],
                s["growth_interval"], s["hysteresis"], s["max_scale"], s["consecutive_hysteresis"])
        elif scaler.kind == "grad_scaler":
            self._rule = GradScalerTwin(s["init_scale"], s["growth_factor"], s["backoff_factor"],
                                        s["growth_interval"])
        else:   # Keras: torch's rule with growth 2, backoff 0.5, never below 1
            self._rule = GradScalerTwin(s["initial_scale"], 2.0, 0.5, s["dynamic_growth_steps"])
            self._floor = np.float32(1.0)

    @property
    def scale(self):
        rule = self._rule
        return float(rule.loss_scale if hasattr(rule, "loss_scale") else rule.scale)

    def step(self, finite):
        if hasattr(self._rule, "update"):
            self._rule.update(finite)
        else:
            self._rule.step(not finite)
        if self._floor is not None and self._rule.scale < self._floor:
            self._rule.scale = self._floor


def _checked(kind, name, value):
    where = "scaler setting %r of kind %r" % (name, kind)
    if name in _BOOLEAN:
        if not isinstance(value, bool):
            raise ValueError("%s must be True or False; got %r" % (where, value))
        return value
    if value is None and name in ("max_scale", "initial_scale", "dynamic_growth_steps"):
        return None
    if name in _INTEGER:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError("%s must be an integer >= 1; got %r" % (where, value))
        return int(value)
    value = number(value, where)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError("%s must be a positive, finite number; got %r" % (where, value))
    return value


def from_report(scaler):
    """The :class:`Scaler` of the report's ``"scaler"`` object (``{"kind": ..., "settings":
    {...}}``), or None when it names no kind (no loss-scale optimizer was built)."""
    if not isinstance(scaler, dict):
        raise ValueError("scaler must be the report's scaler object, a dict with 'kind' and "
                         "'settings'; got %r" % (scaler,))
    kind = scaler.get("kind")
    if kind is None:
        return None
    if kind not in KINDS:
        raise ValueError("scaler kind must be one of %s (or None); got %r"
                         % (", ".join(sorted(KINDS)), kind))
    settings = scaler.get("settings") or {}
    if not isinstance(settings, dict):
        raise ValueError("scaler settings must be a dict of the class's constructor arguments; "
                         "got %r" % (settings,))
    return Scaler(kind, settings)
