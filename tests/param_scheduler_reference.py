"""A plain-Python reference of Megatron-Core's OptimizerParamScheduler rules, for the tests.

Written from the seed's description and Megatron's documented formulas, step by step with
ordinary branches; it shares no code with ``npu_loss_scale.schedules`` (which evaluates one
branch-free formula on Python numbers and on tensors).
"""
import math


class Reference:
    """The schedule as a function of the step count ``n`` (no state besides the settings)."""

    def __init__(self, init_lr, max_lr, min_lr, warmup, decay_steps, style, start_wd, end_wd,
                 wd_steps, wd_style, wsd_steps=None, wsd_style=None):
        self.init_lr, self.max_lr, self.min_lr = init_lr, max_lr, min_lr
        self.warmup, self.decay_steps, self.style = warmup, decay_steps, style
        self.start_wd, self.end_wd, self.wd_steps, self.wd_style = start_wd, end_wd, wd_steps, \
            wd_style
        self.wsd_steps, self.wsd_style = wsd_steps, wsd_style

    def lr(self, n, group=None):
        group = group or {}
        top = group.get("max_lr", self.max_lr)
        bottom = group.get("min_lr", self.min_lr)
        # 1. warmup: a straight line from init_lr (at 0) to the group's peak (at `warmup`)
        if self.warmup > 0 and n <= self.warmup:
            return self.init_lr + (top - self.init_lr) * n / self.warmup
        # 2. constant: the peak, forever
        if self.style == "constant":
            return top
        # 3. every decaying style ends at the floor
        if n > self.decay_steps:
            return bottom
        if self.style == "inverse-square-root":
            value = top * math.sqrt(max(self.warmup, 1)) / math.sqrt(max(n, 1))
            return value if value > bottom else bottom
        fraction = (n - self.warmup) / (self.decay_steps - self.warmup)
        if self.style == "linear":
            factor = 1.0 - fraction
        elif self.style == "cosine":
            factor = (1.0 + math.cos(math.pi * fraction)) / 2.0
        elif self.style == "WSD":
            stable_until = self.decay_steps - self.wsd_steps
            if n <= stable_until:
                factor = 1.0
            else:
                f = (n - stable_until) / self.wsd_steps
                factor = {"linear": lambda: 1.0 - f,
                          "cosine": lambda: (1.0 + math.cos(math.pi * f)) / 2.0,
                          "exponential": lambda: 2.0 * 0.5 ** f - 1.0,
                          "minus_sqrt": lambda: 1.0 - math.sqrt(f)}[self.wsd_style]()
        else:
            raise AssertionError(self.style)
        return bottom + factor * (top - bottom)

    def wd(self, n, group=None):
        """Before the group's wd_mult."""
        group = group or {}
        first = group.get("start_wd", self.start_wd)
        last = group.get("end_wd", self.end_wd)
        if n > self.wd_steps:
            return last
        if self.wd_style == "constant":
            assert first == last
            return last
        fraction = n / self.wd_steps
        if self.wd_style == "linear":
            return first + fraction * (last - first)
        if self.wd_style == "cosine":
            return first + (1.0 + math.cos(math.pi * (1.0 - fraction))) / 2.0 * (last - first)
        raise AssertionError(self.wd_style)
