"""Schedules: Megatron-Core's OptimizerParamScheduler and the single-rate WarmupDecaySchedule.

* :mod:`.formulas` -- the learning-rate and weight-decay formulas, one implementation evaluated
  on Python numbers and on TensorFlow tensors;
* :mod:`.overrides` -- ``ParamGroupOverride`` and its helpers;
* :mod:`.param_scheduler` -- :class:`OptimizerParamScheduler` (groups, state, checkpoint rules);
* :mod:`.param_groups` -- :class:`ParamGroupOptimizer`, the ``tf.compat.v1.train`` optimizer
  that applies each group's scheduled rate and decoupled weight decay;
* :mod:`.warmup_decay` -- :class:`WarmupDecaySchedule`, a rate tensor of ``global_step``.
"""
from npu_loss_scale.schedules.formulas import LR_DECAY_STYLES, WD_INCR_STYLES, WSD_DECAY_STYLES
from npu_loss_scale.schedules.overrides import (
    ParamGroupOverride, combine_param_group_overrides, param_group_override_to_tuple)
from npu_loss_scale.schedules.param_groups import ParamGroupOptimizer
from npu_loss_scale.schedules.param_scheduler import OptimizerParamScheduler
from npu_loss_scale.schedules.warmup_decay import (
    DECAY_STYLES, WarmupDecaySchedule, warmup_decay_learning_rate)

__all__ = [
    "OptimizerParamScheduler", "ParamGroupOverride", "param_group_override_to_tuple",
    "combine_param_group_overrides", "ParamGroupOptimizer", "WarmupDecaySchedule",
    "warmup_decay_learning_rate", "DECAY_STYLES", "LR_DECAY_STYLES", "WSD_DECAY_STYLES",
    "WD_INCR_STYLES",
]
