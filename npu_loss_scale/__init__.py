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
from .megatron_scalers import ConstantGradScaler, DynamicGradScaler, MegatronGradScaler
from .mixed_precision import MegatronGradientProcessor, MegatronMixedPrecisionOptimizer
from .flags import loss_scale_manager_from_flag
from .hooks import LossScaleHook, OverflowStatusClearHook
from .schedules import WarmupDecaySchedule, warmup_decay_learning_rate
from .schedules import (OptimizerParamScheduler, ParamGroupOptimizer, ParamGroupOverride,
                        combine_param_group_overrides, param_group_override_to_tuple)
from .frontends import GradScaler, OptimizerThread

__version__ = "0.1.0"

__all__ = [
    "NPULossScaleOptimizer", "LossScaleManager", "FixedLossScaleManager",
    "ExponentialUpdateLossScaleManager", "get_backend_name", "BACKEND_NAMES", "BACKEND_ENV_VAR",
    "emulation", "saturate", "set_device_sat_mode", "get_device_sat_mode", "is_inf_nan_enabled",
    "loss_scale_manager_from_flag", "LossScaleHook", "OverflowStatusClearHook",
    "clear_overflow_status", "WarmupDecaySchedule",
    "warmup_decay_learning_rate",
    "MegatronGradScaler", "ConstantGradScaler", "DynamicGradScaler",
    "MegatronMixedPrecisionOptimizer", "MegatronGradientProcessor",
    "GradScaler", "OptimizerThread",
    "OptimizerParamScheduler", "ParamGroupOverride", "param_group_override_to_tuple",
    "combine_param_group_overrides", "ParamGroupOptimizer",
]


def __getattr__(name):
    # npu_loss_scale.keras (the Keras NpuLossScaleOptimizer) is imported on first use only:
    # importing the package must not import Keras.
    if name == "keras":
        import importlib  # pylint: disable=import-outside-toplevel
        return importlib.import_module(".keras", __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
