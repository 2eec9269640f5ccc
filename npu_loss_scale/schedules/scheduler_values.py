"""The values an :class:`~npu_loss_scale.schedules.OptimizerParamScheduler` holds: which are
floats, integers or style names, and how an argument, a checkpoint's value or a parameter group is
checked (raising with the argument's name, the value and what is accepted)."""
import numbers

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale.schedules import formulas
from npu_loss_scale.schedules.overrides import check_override

WD_KEYS = ("start_wd", "end_wd", "wd_incr_steps", "wd_incr_style")
FLOATS = ("max_lr", "min_lr", "start_wd", "end_wd")
INTS = ("lr_warmup_steps", "lr_decay_steps", "wd_incr_steps", "num_steps")
STRINGS = ("lr_decay_style", "wd_incr_style")


def steps(name, value, minimum=0):
    """``value`` as an ``int`` of at least ``minimum`` (an integral float is accepted); raises
    naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and not isinstance(value, bool) \
                and float(value).is_integer():
            value = int(value)
        else:
            raise TypeError("%s must be an integer >= %d; got %r (type %s)"
                            % (name, minimum, value, type(value).__name__))
    if value < minimum:
        raise ValueError("%s must be an integer >= %d; got %r" % (name, minimum, value))
    return int(value)


_INT64_MAX = 2 ** 63 - 1
_STYLE_CHOICES = {"lr_decay_style": formulas.LR_DECAY_STYLES,
                  "wd_incr_style": formulas.WD_INCR_STYLES}


def normalise(key, value):
    """A checkpoint's ``value`` of ``key`` checked and as a plain Python value; raises naming
    ``state_dict[key]``, the value and what is accepted."""
    name = "state_dict[%r]" % key
    if key in STRINGS:
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        choices = _STYLE_CHOICES[key]
        if not isinstance(value, str) or value not in choices:
            raise ValueError("%s must be one of %s; got %r (type %s)"
                             % (name, ", ".join(repr(c) for c in choices), value,
                                type(value).__name__))
        return value
    if key in INTS:
        count = steps(name, value)
        if count > _INT64_MAX:
            raise ValueError("%s must be an integer >= 0 and <= %d (int64); got %r"
                             % (name, _INT64_MAX, value))
        return count
    return _checks.real_number(name, value, minimum=0.0)


def check_group(param_group, allow_none):
    """Refuses a parameter group that is not a dict of known override keys (None when
    ``allow_none``)."""
    if param_group is None and allow_none:
        return
    if not isinstance(param_group, dict):
        raise TypeError("param_group must be a dict (a parameter group, for example {} or "
                        "{'max_lr': 1e-4}); got %r (type %s)"
                        % (param_group, type(param_group).__name__))
    check_override(param_group, "param_group")


__all__ = ["WD_KEYS", "FLOATS", "INTS", "STRINGS", "steps", "normalise", "check_group"]
