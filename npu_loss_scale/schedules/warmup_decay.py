"""Learning-rate schedules as graph functions of ``global_step``: linear warmup, then decay.

The decay styles follow Megatron's ``OptimizerParamScheduler``:

* warmup: for ``0 <= step <= warmup_steps`` (when ``warmup_steps > 0``) the rate rises linearly
  from ``init_lr`` to ``max_lr``: ``init_lr + (max_lr - init_lr) * step / warmup_steps``;
* ``'constant'``: ``max_lr`` after warmup, forever;
* past ``decay_steps`` (counted from step 0, warmup included): ``min_lr``;
* ``'linear'``: from ``max_lr`` at the end of warmup down to ``min_lr`` at ``decay_steps``;
* ``'cosine'``: ``min_lr + (max_lr - min_lr) * (1 + cos(pi * r)) / 2`` with
  ``r = (step - warmup_steps) / (decay_steps - warmup_steps)``;
* ``'inverse-square-root'``: ``max(min_lr, max_lr * sqrt(max(warmup_steps, 1)) / sqrt(max(step, 1)))``
  (``decay_steps`` optional; when given, ``min_lr`` after it, as in Megatron).

**Skipped steps.** :class:`~npu_loss_scale.NPULossScaleOptimizer` does not advance
``global_step`` on a step it skips because of an overflow. A schedule driven by ``global_step``
therefore waits too: the learning rate of the next applied update is the one the skipped update
would have used, and warmup/decay count *applied* updates only. A run that starts at a loss scale
of 2**32 and backs off over its first few dozen steps still gets its full warmup.

Example::

    from npu_loss_scale.schedules import WarmupDecaySchedule
    schedule = WarmupDecaySchedule(max_lr=1e-4, warmup_steps=20, decay_steps=200,
                                   decay_style="linear")
    lr = schedule(tf.compat.v1.train.get_or_create_global_step())   # float32 tensor
    schedule.value_at(110)                                          # the same, in Python
"""
import math
import numbers

from npu_loss_scale.schedules import formulas

DECAY_STYLES = ("linear", "cosine", "inverse-square-root", "constant")


def _real(name, value, minimum=0.0):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or math.isnan(float(value)) or math.isinf(float(value)):
        raise TypeError("%s must be a finite real number >= %r; got %r" % (name, minimum, value))
    if value < minimum:
        raise ValueError("%s must be >= %r; got %r" % (name, minimum, value))
    return float(value)


def _steps(name, value, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an integer >= 0%s; got %r"
                        % (name, " or None" if allow_none else "", value))
    if value < 0:
        raise ValueError("%s must be an integer >= 0; got %r" % (name, value))
    return int(value)


class WarmupDecaySchedule:
    """Linear warmup then ``decay_style`` decay, evaluated on a step counter.

    A thin face of the formulas of :class:`OptimizerParamScheduler` (one implementation, in
    :mod:`npu_loss_scale.schedules.formulas`) for a single learning rate driven by
    ``global_step``, without parameter groups or weight decay.

    Args:
      max_lr: the peak rate, reached at the end of warmup (>= 0).
      warmup_steps: steps of linear warmup (>= 0; 0 = none).
      decay_steps: the step at which decay ends and ``min_lr`` holds, counted from 0 and
        including warmup. Required for ``'linear'`` and ``'cosine'`` (and then
        ``> warmup_steps``); optional for ``'inverse-square-root'``; ignored for ``'constant'``.
      decay_style: one of ``'linear'``, ``'cosine'``, ``'inverse-square-root'``, ``'constant'``.
      min_lr: the floor (0 <= min_lr <= max_lr).
      init_lr: the rate at step 0 of warmup (0 <= init_lr <= max_lr).
    """

    def __init__(self, max_lr, warmup_steps=0, decay_steps=None, decay_style="linear",
                 min_lr=0.0, init_lr=0.0):
        self.max_lr = _real("max_lr", max_lr)
        self.min_lr = _real("min_lr", min_lr)
        self.init_lr = _real("init_lr", init_lr)
        self.warmup_steps = _steps("warmup_steps", warmup_steps)
        self.decay_steps = _steps("decay_steps", decay_steps, allow_none=True)
        if decay_style not in DECAY_STYLES:
            raise ValueError("decay_style must be one of %s; got %r"
                             % (", ".join(repr(s) for s in DECAY_STYLES), decay_style))
        self.decay_style = decay_style
        if self.min_lr > self.max_lr:
            raise ValueError("min_lr must be <= max_lr (%r); got %r" % (self.max_lr, self.min_lr))
        if self.init_lr > self.max_lr:
            raise ValueError("init_lr must be <= max_lr (%r); got %r"
                             % (self.max_lr, self.init_lr))
        if decay_style in ("linear", "cosine"):
            if self.decay_steps is None:
                raise ValueError("decay_steps is required for decay_style=%r (an integer > "
                                 "warmup_steps=%d); got None" % (decay_style, self.warmup_steps))
            if self.decay_steps <= self.warmup_steps:
                raise ValueError("decay_steps must be > warmup_steps (%d) for decay_style=%r; "
                                 "got %d" % (self.warmup_steps, decay_style, self.decay_steps))
        if decay_style == "constant":
            self.decay_steps = None

    def __repr__(self):
        return ("WarmupDecaySchedule(max_lr=%r, warmup_steps=%r, decay_steps=%r, "
                "decay_style=%r, min_lr=%r, init_lr=%r)" % (
                    self.max_lr, self.warmup_steps, self.decay_steps, self.decay_style,
                    self.min_lr, self.init_lr))

    def _formula_args(self):
        return dict(init_lr=self.init_lr, max_lr=self.max_lr, min_lr=self.min_lr,
                    lr_warmup_steps=self.warmup_steps, lr_decay_steps=self.decay_steps,
                    lr_decay_style=self.decay_style)

    # -- pure Python ------------------------------------------------------------------------
    def value_at(self, step):
        """The learning rate at ``step`` (a Python number), as a Python float."""
        return formulas.learning_rate(formulas.PY, step, **self._formula_args())

    # -- graph ------------------------------------------------------------------------------
    def __call__(self, global_step=None, name=None):
        """The learning rate as a float32 scalar tensor of ``global_step`` (default: the graph's
        global step, created if missing)."""
        import tensorflow as tf

        if global_step is None:
            global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.name_scope(name or "learning_rate_schedule"):
            lr = formulas.learning_rate(formulas.tf_ops(), global_step, **self._formula_args())
            return tf.cast(lr, tf.float32, name="learning_rate")


def warmup_decay_learning_rate(global_step, max_lr, warmup_steps=0, decay_steps=None,
                               decay_style="linear", min_lr=0.0, init_lr=0.0, name=None):
    """Functional form of :class:`WarmupDecaySchedule`: returns the float32 rate tensor."""
    return WarmupDecaySchedule(max_lr, warmup_steps=warmup_steps, decay_steps=decay_steps,
                               decay_style=decay_style, min_lr=min_lr,
                               init_lr=init_lr)(global_step, name=name)


__all__ = [
    "DECAY_STYLES", "WarmupDecaySchedule", "warmup_decay_learning_rate",
]
