"""Pure-Python reference of the loss-scale update rules.

These mirror, step for step and in float32 arithmetic, what the graph managers in
:mod:`npu_loss_scale.scaling.managers` compute. They exist so that tests (and users who want to reason
about a schedule) can replay a sequence of finite / overflowed steps without TensorFlow::

    >>> from npu_loss_scale.scaling.reference.ascend import ExponentialUpdateRule
    >>> rule = ExponentialUpdateRule(init_loss_scale=2.0**32, incr_every_n_steps=1000,
    ...                              decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    >>> [rule.update(finite) for finite in (False, False, True)]
    [False, True, False]
    >>> float(rule.loss_scale), rule.good_steps, rule.bad_steps
    (2147483648.0, 1, 0)

``update`` returns True when the loss scale changed.
"""
import numpy as np

# The growth ceiling Ascend uses: the scale only grows while it is below 3.4e38 / incr_ratio,
# so that growing can never produce an inf.
GROWTH_CEILING = 3.4e38


def growth_threshold(incr_ratio):
    """The float32 bound below which the scale may still grow by ``incr_ratio``."""
    return np.float32(GROWTH_CEILING / float(incr_ratio))


class ExponentialUpdateRule:
    """Ascend's ``ExponentialUpdateLossScaleManager`` rule, on plain Python state.

    On a finite step: if ``good_steps + 1 >= incr_every_n_steps`` the scale is multiplied by
    ``incr_ratio`` (only while it is below ``3.4e38 / incr_ratio``) and both counters reset;
    otherwise ``good_steps += 1`` (``bad_steps`` keeps its value).

    On an overflowed step: if ``bad_steps + 1 >= decr_every_n_nan_or_inf`` the scale becomes
    ``max(1, scale * decr_ratio)`` and both counters reset; otherwise ``bad_steps += 1`` and
    ``good_steps = 0``.
    """

    def __init__(self, init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf=2,
                 incr_ratio=2, decr_ratio=0.8):
        self.loss_scale = np.float32(init_loss_scale)
        self.incr_every_n_steps = int(incr_every_n_steps)
        self.decr_every_n_nan_or_inf = int(decr_every_n_nan_or_inf)
        self.incr_ratio = np.float32(incr_ratio)
        self.decr_ratio = np.float32(decr_ratio)
        self._threshold = growth_threshold(incr_ratio)
        self.good_steps = 0
        self.bad_steps = 0

    def update(self, finite):
        before = self.loss_scale
        if finite:
            if self.good_steps + 1 >= self.incr_every_n_steps:
                if self.loss_scale < self._threshold:
                    self.loss_scale = np.float32(self.loss_scale * self.incr_ratio)
                self.good_steps = 0
                self.bad_steps = 0
            else:
                self.good_steps += 1
        else:
            if self.bad_steps + 1 >= self.decr_every_n_nan_or_inf:
                self.loss_scale = np.maximum(np.float32(1.0),
                                             np.float32(self.loss_scale * self.decr_ratio))
                self.good_steps = 0
                self.bad_steps = 0
            else:
                self.bad_steps += 1
                self.good_steps = 0
        return bool(self.loss_scale != before)


class FixedRule:
    """A fixed scale: ``update`` never changes it."""

    def __init__(self, loss_scale):
        self.loss_scale = np.float32(loss_scale)

    def update(self, finite):  # pylint: disable=unused-argument
        return False


# Unscaling. Above this scale the float32 reciprocal 1/S is subnormal (CPU kernels flush it to
# zero), so the package multiplies by two normal factors instead: 2**-64, then fl(2**64 / S).
UNSCALE_SPLIT_ABOVE = np.float32(2.0 ** 126)


def unscale(grad, loss_scale):
    """``grad`` (a NumPy float16, float32 or float64 array) divided by ``loss_scale`` as the
    package's optimizers do it: times ``fl(1/S)`` up to ``S = 2**126``, above it times
    ``2**-64`` and then times ``fl(2**64/S)`` (float32 factors; float16 in float32 and rounded
    back; float64 in float64)."""
    scale = np.float32(loss_scale)
    if scale > UNSCALE_SPLIT_ABOVE:
        factors = (np.float32(2.0 ** -64), np.float32(np.float32(2.0 ** 64) / scale))
    else:
        factors = (np.float32(np.float32(1.0) / scale),)
    grad = np.asarray(grad)
    wide = grad.astype(np.float64 if grad.dtype == np.float64 else np.float32)
    for factor in factors:
        wide = wide * wide.dtype.type(factor)
    return wide.astype(grad.dtype)


__all__ = [
    "GROWTH_CEILING", "growth_threshold", "ExponentialUpdateRule", "FixedRule",
    "UNSCALE_SPLIT_ABOVE", "unscale",
]
