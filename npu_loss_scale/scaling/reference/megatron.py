"""Pure-Python twin of :class:`~npu_loss_scale.DynamicGradScaler`, for tests and reasoning.

Written from the rules as stated (Megatron-Core's grad-scaler documentation, corrected by its
code: hysteresis is spent cumulatively and refilled only by a growth), independently of the
TensorFlow implementation: no code is shared. Arithmetic is float32, like the variables::

    >>> from npu_loss_scale.scaling.reference.megatron import DynamicScalerTwin
    >>> twin = DynamicScalerTwin(initial_scale=1024.0, min_scale=1.0, growth_factor=2.0,
    ...                          backoff_factor=0.5, growth_interval=3, hysteresis=2)
    >>> for overflowed in (True, False, True, True):
    ...     twin.step(overflowed)
    >>> twin.as_dict()
    {'scale': 256.0, 'growth_tracker': 0, 'hysteresis_tracker': -1}
"""
import numpy as np

_F32_MAX = np.finfo(np.float32).max


class DynamicScalerTwin:
    """The dynamic grad-scaler rule on plain Python state (see ``DynamicGradScaler``)."""

    def __init__(self, initial_scale, min_scale, growth_factor, backoff_factor, growth_interval,
                 hysteresis, max_scale=None, consecutive_hysteresis=False):
        self.scale = np.float32(initial_scale)
        self.min_scale = np.float32(min_scale)
        self.max_scale = np.float32(_F32_MAX if max_scale is None else max_scale)
        self.growth_factor = np.float32(growth_factor)
        self.backoff_factor = np.float32(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.hysteresis = int(hysteresis)
        self.consecutive_hysteresis = bool(consecutive_hysteresis)
        self.growth_tracker = 0
        self.hysteresis_tracker = self.hysteresis
        self.overflows_at_min_in_a_row = 0

    def step(self, overflowed):
        """One training step; ``overflowed`` True means the gradients had an inf/NaN."""
        used = self.scale
        if overflowed:
            self.overflows_at_min_in_a_row = (self.overflows_at_min_in_a_row + 1
                                              if used <= self.min_scale else 0)
            self.growth_tracker = 0
            self.hysteresis_tracker = self.hysteresis_tracker - 1
            if self.hysteresis_tracker <= 0:
                smaller = np.float32(self.scale * self.backoff_factor)
                self.scale = smaller if smaller > self.min_scale else self.min_scale
            return
        self.overflows_at_min_in_a_row = 0
        self.growth_tracker = self.growth_tracker + 1
        if self.consecutive_hysteresis:
            self.hysteresis_tracker = self.hysteresis
        if self.growth_tracker >= self.growth_interval:
            self.growth_tracker = 0
            self.hysteresis_tracker = self.hysteresis
            with np.errstate(over="ignore"):
                bigger = np.float32(self.scale * self.growth_factor)
            self.scale = bigger if bigger < self.max_scale else self.max_scale

    def as_dict(self):
        return {"scale": float(self.scale), "growth_tracker": self.growth_tracker,
                "hysteresis_tracker": self.hysteresis_tracker}


__all__ = [
    "DynamicScalerTwin",
]
