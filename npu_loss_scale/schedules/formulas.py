"""The learning-rate and weight-decay formulas: ONE implementation, two evaluators.

Every schedule in this package (:class:`OptimizerParamScheduler`, ``WarmupDecaySchedule``)
evaluates these two functions. They are written once against a tiny "ops" interface so that the
same text gives

* Python floats (:data:`PY`): the eager/TF2 path, ``get_lr``/``get_wd`` on plain dicts;
* float64 TensorFlow tensors (:func:`tf_ops`): the graph path, read at apply time.

To work for tensors the formulas select with ``where`` instead of branching, so every candidate
is computed; ratios are clamped to ``[0, 1]`` and denominators guarded, which changes no value on
the selected branch (there the ratio is already in range and the denominator positive).

The rules (Megatron-Core's ``OptimizerParamScheduler``, ``n`` = the step counter):

learning rate, with ``max_lr``/``min_lr`` possibly taken from a parameter group:

* warmup, when ``lr_warmup_steps > 0`` and ``n <= lr_warmup_steps``:
  ``init_lr + (max_lr - init_lr) * n / lr_warmup_steps``;
* ``constant``: ``max_lr`` after warmup, forever (it never decays to ``min_lr``);
* every other style: ``min_lr`` once ``n > lr_decay_steps``;
* ``inverse-square-root``: ``max(min_lr, max_lr * sqrt(max(warmup, 1)) / sqrt(max(n, 1)))``;
* ``linear`` / ``cosine``: ``min_lr + coeff * (max_lr - min_lr)`` with
  ``r = (n - warmup) / (lr_decay_steps - warmup)``, ``coeff = 1 - r`` or ``(1 + cos(pi r)) / 2``;
* ``WSD`` (warmup-stable-decay): ``coeff = 1`` up to ``lr_decay_steps - wsd_decay_steps``, then
  over the last ``wsd_decay_steps`` steps with ``r = (n - start) / wsd_decay_steps``:
  ``linear`` ``1 - r``, ``cosine`` ``(1 + cos(pi r)) / 2``, ``exponential`` ``2 * 0.5**r - 1``,
  ``minus_sqrt`` ``1 - sqrt(r)``.

weight decay: ``end_wd`` once ``n > wd_incr_steps``; before that, with ``r = n / wd_incr_steps``,
``constant`` ``end_wd`` (start and end must be equal), ``linear`` ``start + r * (end - start)``,
``cosine`` ``start + (1 + cos(pi (1 - r))) / 2 * (end - start)``.
"""
import math

LR_DECAY_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")
WSD_DECAY_STYLES = ("linear", "cosine", "exponential", "minus_sqrt")
WD_INCR_STYLES = ("constant", "linear", "cosine")


class _PythonOps:
    """Python floats; ``select`` picks by a Python string."""

    @staticmethod
    def num(x):
        return float(x)

    @staticmethod
    def where(cond, a, b):
        return a if cond else b

    @staticmethod
    def both(a, b):
        return bool(a) and bool(b)

    @staticmethod
    def clip01(x):
        return min(max(x, 0.0), 1.0)

    maximum = staticmethod(max)
    cos = staticmethod(math.cos)
    sqrt = staticmethod(math.sqrt)

    @staticmethod
    def half_pow(x):
        return math.pow(0.5, x)

    @staticmethod
    def select(key, candidates):
        return candidates[key]


PY = _PythonOps()


class _TensorOps:
    """float64 TensorFlow tensors; ``select`` picks by a Python string or a string tensor."""

    def __init__(self):
        import tensorflow as tf  # imported only when a graph schedule is built
        from npu_loss_scale._internal.compat.ops import (  # pylint: disable=import-outside-toplevel
            where)
        self.tf = tf
        self._where = where

    def num(self, x):
        tf = self.tf
        if isinstance(x, (tf.Tensor, tf.Variable)) or hasattr(x, "dtype"):
            return tf.cast(x, tf.float64)
        return tf.constant(float(x), tf.float64)

    def where(self, cond, a, b):
        return self._where(cond, a, b)

    def both(self, a, b):
        return self.tf.logical_and(a, b)

    def clip01(self, x):
        return self.tf.clip_by_value(x, 0.0, 1.0)

    def maximum(self, a, b):
        return self.tf.maximum(self.num(a), self.num(b))

    def cos(self, x):
        return self.tf.cos(x)

    def sqrt(self, x):
        return self.tf.sqrt(x)

    def half_pow(self, x):
        return self.tf.pow(self.tf.constant(0.5, self.tf.float64), x)

    def select(self, key, candidates):
        if isinstance(key, str):
            return candidates[key]
        names = list(candidates)
        out = candidates[names[-1]]
        for name in reversed(names[:-1]):
            out = self.where(self.tf.equal(key, name), candidates[name], out)
        return out


def tf_ops():
    """The tensor evaluator (TensorFlow imported on first use)."""
    return _TensorOps()


def learning_rate(ops, num_steps, *, init_lr, max_lr, min_lr, lr_warmup_steps, lr_decay_steps,
                  lr_decay_style, wsd_decay_steps=None, lr_wsd_decay_style=None):
    """The learning rate at ``num_steps`` (see the module docstring).

    ``lr_decay_steps=None`` means "never ends" (only ``WarmupDecaySchedule`` uses it, for
    inverse-square-root and constant). ``lr_decay_style`` and ``lr_wsd_decay_style`` may be
    string tensors on the tensor path; the numbers may be tensors or Python numbers."""
    n = ops.num(num_steps)
    init_lr, max_lr, min_lr = ops.num(init_lr), ops.num(max_lr), ops.num(min_lr)
    warmup = ops.num(lr_warmup_steps)
    one = ops.num(1.0)

    ramp = init_lr + (max_lr - init_lr) * n / ops.maximum(warmup, one)
    in_warmup = ops.both(warmup > 0.0, n <= warmup)

    inverse_sqrt = ops.maximum(min_lr, max_lr * ops.sqrt(ops.maximum(warmup, one))
                               / ops.sqrt(ops.maximum(n, one)))
    candidates = {"constant": max_lr, "inverse-square-root": inverse_sqrt}
    if lr_decay_steps is not None:
        decay = ops.num(lr_decay_steps)
        ratio = ops.clip01((n - warmup) / ops.maximum(decay - warmup, one))
        coeffs = {"linear": 1.0 - ratio,
                  "cosine": 0.5 * (ops.cos(math.pi * ratio) + 1.0)}
        if wsd_decay_steps is not None and lr_wsd_decay_style is not None:
            wsd = ops.num(wsd_decay_steps)
            anneal_start = decay - wsd
            r = ops.clip01((n - anneal_start) / ops.maximum(wsd, one))
            anneal = ops.select(lr_wsd_decay_style, {
                "linear": 1.0 - r,
                "cosine": 0.5 * (ops.cos(math.pi * r) + 1.0),
                "exponential": 2.0 * ops.half_pow(r) - 1.0,
                "minus_sqrt": 1.0 - ops.sqrt(r),
            })
            coeffs["WSD"] = ops.where(n <= anneal_start, one, anneal)
        for style, coeff in coeffs.items():
            candidates[style] = min_lr + coeff * (max_lr - min_lr)
    after_warmup = ops.select(lr_decay_style, candidates)
    if lr_decay_steps is not None:
        past_end = ops.both(n > decay, _not_constant(ops, lr_decay_style))
        after_warmup = ops.where(past_end, min_lr, after_warmup)
    return ops.where(in_warmup, ramp, after_warmup)


def _not_constant(ops, style):
    if isinstance(style, str):
        return style != "constant"
    return ops.tf.not_equal(style, "constant")


def weight_decay(ops, num_steps, *, start_wd, end_wd, wd_incr_steps, wd_incr_style):
    """The weight decay at ``num_steps`` before any ``wd_mult`` (see the module docstring)."""
    n = ops.num(num_steps)
    start_wd, end_wd = ops.num(start_wd), ops.num(end_wd)
    steps = ops.num(wd_incr_steps)
    r = ops.clip01(n / ops.maximum(steps, ops.num(1.0)))
    coeff = ops.select(wd_incr_style, {
        "constant": ops.num(1.0),
        "linear": r,
        "cosine": 0.5 * (ops.cos(math.pi * (1.0 - r)) + 1.0),
    })
    rising = ops.where(_is_constant(ops, wd_incr_style), end_wd,
                       start_wd + coeff * (end_wd - start_wd))
    return ops.where(n > steps, end_wd, rising)


def _is_constant(ops, style):
    if isinstance(style, str):
        return style == "constant"
    return ops.tf.equal(style, "constant")


__all__ = [
    "LR_DECAY_STYLES", "WSD_DECAY_STYLES", "WD_INCR_STYLES", "PY", "tf_ops", "learning_rate",
    "weight_decay",
]
