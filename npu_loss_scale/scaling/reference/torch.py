"""Pure-Python twin of :class:`~npu_loss_scale.GradScaler`'s update rule, for tests and reasoning.

Written from the rule as documented in docs/grad_scaler.md, independently of the TensorFlow
implementation (no code is shared). Arithmetic is float32, like the scale variable::

    >>> from npu_loss_scale.scaling.reference.torch import GradScalerTwin
    >>> twin = GradScalerTwin(init_scale=4.0, growth_factor=2.0, backoff_factor=0.5,
    ...                       growth_interval=2)
    >>> for overflowed in (False, False, True):
    ...     twin.step(overflowed)
    >>> twin.as_dict()
    {'scale': 4.0, 'growth_tracker': 0}

The one rule torch does not have: the scale never goes below float32's smallest normal number
(``MIN_SCALE`` = 2**-126). Repeated backoff stops there instead of reaching a subnormal scale,
which CPU kernels flush to zero (a zero scale would make every unscaled gradient inf or NaN).
"""
import numpy as np

MIN_SCALE = np.finfo(np.float32).tiny     # 2**-126, float32's smallest normal number


class GradScalerTwin:
    """GradScaler's ``update()`` rule on plain Python state (see the module docstring)."""

    def __init__(self, init_scale, growth_factor, backoff_factor, growth_interval):
        self.scale = np.float32(init_scale)
        self.growth_factor = np.float32(growth_factor)
        self.backoff_factor = np.float32(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.growth_tracker = 0

    def step(self, overflowed):
        """One ``update()`` after an iteration; ``overflowed`` True when any optimizer's
        gradients overflowed. Returns True when the overflow happened at ``MIN_SCALE`` (the
        scaler warns: the scale cannot go lower)."""
        if overflowed:
            stuck = bool(self.scale <= MIN_SCALE)
            with np.errstate(under="ignore"):
                smaller = np.float32(self.scale * self.backoff_factor)
            self.scale = smaller if smaller >= MIN_SCALE else np.float32(MIN_SCALE)
            self.growth_tracker = 0
            return stuck
        self.growth_tracker += 1
        if self.growth_tracker == self.growth_interval:
            with np.errstate(over="ignore"):
                bigger = np.float32(self.scale * self.growth_factor)
            if np.isfinite(bigger):
                self.scale = bigger
            self.growth_tracker = 0
        return False

    def as_dict(self):
        return {"scale": float(self.scale), "growth_tracker": self.growth_tracker}


__all__ = [
    "MIN_SCALE", "GradScalerTwin",
]
