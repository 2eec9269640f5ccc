"""The fuzz campaign's NumPy side of the numbers: rounding to the compute dtype, and pure-Python
twins of the loss-scale rules, written from the documented rules and sharing no code with the
package (scripts/fuzz_campaign.py)."""
import numpy as np

F32 = np.float32
F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = np.finfo(np.float32).tiny      # float32's smallest normal number, 2**-126
DTYPE_MAX = {"float16": 65504.0, "bfloat16": float(np.float32(3.3895313892515355e38)),
             "float32": F32_MAX}


# ---------------------------------------------------------------------------------------------
# Rounding to the compute dtype, in NumPy
# ---------------------------------------------------------------------------------------------
def _round_bf16(x):
    b = np.asarray(x, np.float32).copy().view(np.uint32)
    finite = np.isfinite(b.view(np.float32))
    rounding = ((b >> 16) & 1) + np.uint32(0x7FFF)
    r = np.where(finite, (b + rounding) & np.uint32(0xFFFF0000), b & np.uint32(0xFFFF0000))
    return r.astype(np.uint32).view(np.float32)


def round_to(dtype, x):
    """``x`` (float32 values) rounded to ``dtype`` and returned as float32."""
    x = np.asarray(x, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "float16":
            return x.astype(np.float16).astype(np.float32)
        if dtype == "bfloat16":
            return _round_bf16(x)
    return x


# ---------------------------------------------------------------------------------------------
# Pure twins of the loss-scale rules (written from the documented rules; no package code)
# ---------------------------------------------------------------------------------------------
class AscendExponentialTwin:
    """Ascend's ExponentialUpdateLossScaleManager."""

    def __init__(self, init, incr_every, decr_every, incr_ratio, decr_ratio):
        self.scale, self.good, self.bad = F32(init), 0, 0
        self.incr_every, self.decr_every = incr_every, decr_every
        self.incr_ratio, self.decr_ratio = F32(incr_ratio), F32(decr_ratio)
        self.ceiling = F32(3.4e38 / float(incr_ratio))

    def step(self, overflowed):
        if not overflowed:
            if self.good + 1 >= self.incr_every:
                if self.scale < self.ceiling:
                    self.scale = F32(self.scale * self.incr_ratio)
                self.good = self.bad = 0
            else:
                self.good += 1
        elif self.bad + 1 >= self.decr_every:
            self.scale = max(F32(1.0), F32(self.scale * self.decr_ratio))
            self.good = self.bad = 0
        else:
            self.bad += 1
            self.good = 0

    def state(self):
        return {"loss_scale": float(self.scale), "good_steps": self.good, "bad_steps": self.bad}


class FixedTwin:
    def __init__(self, scale):
        self.scale = F32(scale)

    def step(self, overflowed):  # pylint: disable=unused-argument
        pass

    def state(self):
        return {"loss_scale": float(self.scale)}


class MegatronDynamicTwin:
    """Megatron-Core's DynamicGradScaler (cumulative hysteresis, refilled by a growth)."""

    def __init__(self, init, min_scale, growth_factor, backoff_factor, growth_interval,
                 hysteresis):
        self.scale, self.min_scale = F32(init), F32(min_scale)
        self.growth_factor, self.backoff_factor = F32(growth_factor), F32(backoff_factor)
        self.growth_interval, self.hysteresis = growth_interval, hysteresis
        self.growth_tracker, self.hysteresis_tracker = 0, hysteresis

    def step(self, overflowed):
        if overflowed:
            self.growth_tracker = 0
            self.hysteresis_tracker -= 1
            if self.hysteresis_tracker <= 0:
                self.scale = max(F32(self.scale * self.backoff_factor), self.min_scale)
        else:
            self.growth_tracker += 1
            if self.growth_tracker == self.growth_interval:
                self.growth_tracker = 0
                self.hysteresis_tracker = self.hysteresis
                with np.errstate(over="ignore"):
                    grown = F32(self.scale * self.growth_factor)
                self.scale = min(grown, F32(F32_MAX))

    def state(self):
        return {"scale": float(self.scale), "growth_tracker": self.growth_tracker,
                "hysteresis_tracker": self.hysteresis_tracker}


class TorchScalerTwin:
    """torch.amp.GradScaler's update rule; backoff stops at float32's smallest normal number."""

    def __init__(self, init, growth_factor, backoff_factor, growth_interval):
        self.scale, self.tracker = F32(init), 0
        self.growth_factor, self.backoff_factor = F32(growth_factor), F32(backoff_factor)
        self.growth_interval = growth_interval

    def step(self, overflowed):
        if overflowed:
            with np.errstate(under="ignore"):
                self.scale = max(F32(self.scale * self.backoff_factor), F32_TINY)
            self.tracker = 0
        else:
            self.tracker += 1
            if self.tracker == self.growth_interval:
                with np.errstate(over="ignore"):
                    grown = F32(self.scale * self.growth_factor)
                if np.isfinite(grown):        # torch never grows the scale to inf
                    self.scale = grown
                self.tracker = 0

    def state(self):
        return {"scale": float(self.scale), "growth_tracker": self.tracker}


class KerasTwin:
    """The Keras dynamic loss scale: halve on overflow (never below 1), double after N finite;
    a doubling that would reach inf keeps the scale (Keras 2's rule, the package's on Keras 2
    and 3: the scale never becomes infinite)."""

    def __init__(self, init, growth_steps):
        self.scale, self.counter, self.growth_steps = F32(init), 0, growth_steps

    def step(self, overflowed):
        if overflowed:
            self.scale = max(F32(self.scale * F32(0.5)), F32(1.0))
            self.counter = 0
        else:
            self.counter += 1
            if self.counter == self.growth_steps:
                with np.errstate(over="ignore"):
                    doubled = F32(self.scale * F32(2.0))
                if np.isfinite(doubled):
                    self.scale = doubled
                self.counter = 0

    def state(self):
        return {"loss_scale": float(self.scale)}
