"""npu-loss-scale: Ascend NPU loss scaling for TensorFlow, testable on an ordinary CPU.

Example::

    import tensorflow as tf
    import npu_loss_scale as nls

    opt = tf.compat.v1.train.AdamOptimizer(1e-3)
    mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=2**32, incr_every_n_steps=1000,
                                                decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    opt = nls.NPULossScaleOptimizer(opt, mgr)
    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
"""
from . import emulation
from .detection import (BACKEND_NAMES, ENV_VAR as BACKEND_ENV_VAR, clear_overflow_status,
                        get_backend_name)
from .emulation import get_device_sat_mode, is_inf_nan_enabled, saturate, set_device_sat_mode
from .optimizer import NPULossScaleOptimizer
from .policy import ExponentialUpdateLossScaleManager, FixedLossScaleManager, LossScaleManager
from .flags import loss_scale_manager_from_flag
from .hooks import LossScaleHook, OverflowStatusClearHook
from .schedules import WarmupDecaySchedule, warmup_decay_learning_rate

__version__ = "0.1.0"

__all__ = [
    "NPULossScaleOptimizer", "LossScaleManager", "FixedLossScaleManager",
    "ExponentialUpdateLossScaleManager", "get_backend_name", "BACKEND_NAMES", "BACKEND_ENV_VAR",
    "emulation", "saturate", "set_device_sat_mode", "get_device_sat_mode", "is_inf_nan_enabled",
    "loss_scale_manager_from_flag", "LossScaleHook", "OverflowStatusClearHook",
    "clear_overflow_status", "WarmupDecaySchedule",
    "warmup_decay_learning_rate",
]
