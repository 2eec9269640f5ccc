"""Parameter-group overrides: per-group values the scheduler reads instead of its own.

As in Megatron-Core, an override is a plain dict (a ``TypedDict``) whose known keys are
``max_lr``, ``min_lr``, ``start_wd``, ``end_wd`` and ``wd_mult``; other keys are allowed and are
kept on the group (an optimizer factory may read them, for example ``eps``).

Example::

    from npu_loss_scale import (ParamGroupOverride, combine_param_group_overrides,
                                param_group_override_to_tuple)
    no_decay = ParamGroupOverride(wd_mult=0.0)
    slow = ParamGroupOverride(max_lr=1e-5, min_lr=0.0)
    both = combine_param_group_overrides([no_decay, slow])      # {'wd_mult': 0.0, 'max_lr': ...}
    param_group_override_to_tuple(both) == param_group_override_to_tuple(dict(reversed(both.items())))
"""

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal.compat.typing import TypedDict

#: Override keys the scheduler itself reads.
SCHEDULER_KEYS = ("max_lr", "min_lr", "start_wd", "end_wd", "wd_mult")


class ParamGroupOverride(TypedDict, total=False):
    """Values of one parameter group that replace the scheduler's (all optional).

    ``max_lr``/``min_lr`` replace the peak and floor of the learning rate (warmup still starts
    at the scheduler's ``init_lr``), ``start_wd``/``end_wd`` the weight-decay range, and
    ``wd_mult`` multiplies the group's weight decay when the scheduler sets it on the group
    (``0.0`` = no weight decay). Other keys are allowed: ``ParamGroupOverride(eps=1e-8)``.
    """

    max_lr: float
    min_lr: float
    start_wd: float
    end_wd: float
    wd_mult: float


def param_group_override_to_tuple(param_group_override):
    """A hashable key for an override that does not depend on the order of its keys.

    ``None`` (no override) gives ``None``; otherwise the ``(key, value)`` pairs sorted by key.
    """
    if param_group_override is None:
        return None
    if not isinstance(param_group_override, dict):
        raise TypeError("param_group_override must be a dict (ParamGroupOverride) or None; got "
                        "%r (type %s)" % (param_group_override,
                                          type(param_group_override).__name__))
    return tuple(sorted(param_group_override.items(), key=lambda item: item[0]))


def combine_param_group_overrides(param_group_overrides):
    """Merges a list of overrides (``None`` entries ignored) into one.

    A key set by several overrides must have the same value in each; otherwise ``ValueError``
    names the key and both values.
    """
    if isinstance(param_group_overrides, dict) or not hasattr(param_group_overrides, "__iter__"):
        raise TypeError("param_group_overrides must be a list of ParamGroupOverride dicts (or "
                        "None entries); got %r (type %s)"
                        % (param_group_overrides, type(param_group_overrides).__name__))
    combined = ParamGroupOverride()
    for override in param_group_overrides:
        if override is None:
            continue
        if not isinstance(override, dict):
            raise TypeError("each entry of param_group_overrides must be a dict "
                            "(ParamGroupOverride) or None; got %r (type %s)"
                            % (override, type(override).__name__))
        for key, value in override.items():
            if key in combined and combined[key] != value:
                raise ValueError("conflicting param group overrides for %r: %r and %r"
                                 % (key, combined[key], value))
            combined[key] = value
    return combined


def check_override(override, where="param group override"):
    """Checks the scheduler keys of an override (non-negative finite numbers; min <= max)."""
    for key in SCHEDULER_KEYS:
        if key in override:
            _checks.real_number("%s[%r]" % (where, key), override[key], minimum=0.0)
    if "max_lr" in override and "min_lr" in override and override["min_lr"] > override["max_lr"]:
        raise ValueError("%s: min_lr must be <= max_lr (%r); got %r"
                         % (where, override["max_lr"], override["min_lr"]))
    return override


__all__ = [
    "SCHEDULER_KEYS", "ParamGroupOverride", "param_group_override_to_tuple",
    "combine_param_group_overrides", "check_override",
]
