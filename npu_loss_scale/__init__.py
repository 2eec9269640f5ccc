"""npu-loss-scale: Ascend NPU loss scaling for TensorFlow, testable on an ordinary CPU.

Example::

    import tensorflow as tf
    import npu_loss_scale as nls

    opt = tf.compat.v1.train.AdamOptimizer(1e-3)
    mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=2**32, incr_every_n_steps=1000,
                                                decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    opt = nls.NPULossScaleOptimizer(opt, mgr)
    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())

Importing the package is cheap: it imports neither TensorFlow nor any submodule. Each name below
is imported from its submodule on first use (``nls.NPULossScaleOptimizer``, ``from
npu_loss_scale import GradScaler``), so that, for example, the package's pytest plugin (loaded by
pytest at start-up through its entry point) costs nothing in test runs that do not use it.
"""
import importlib
import importlib.util

__version__ = "0.2.0"

# public name -> (submodule, attribute in it; None = the submodule itself)
_EXPORTS = {
    "emulation": (".emulation", None),
    "BACKEND_NAMES": (".detection", "BACKEND_NAMES"),
    "BACKEND_ENV_VAR": (".detection", "ENV_VAR"),
    "clear_overflow_status": (".detection", "clear_overflow_status"),
    "get_backend_name": (".detection", "get_backend_name"),
    "get_device_sat_mode": (".emulation", "get_device_sat_mode"),
    "is_inf_nan_enabled": (".emulation", "is_inf_nan_enabled"),
    "saturate": (".emulation", "saturate"),
    "set_device_sat_mode": (".emulation", "set_device_sat_mode"),
    "NPULossScaleOptimizer": (".optimizer", "NPULossScaleOptimizer"),
    "ExponentialUpdateLossScaleManager": (".policy", "ExponentialUpdateLossScaleManager"),
    "FixedLossScaleManager": (".policy", "FixedLossScaleManager"),
    "LossScaleManager": (".policy", "LossScaleManager"),
    "ConstantGradScaler": (".megatron_scalers", "ConstantGradScaler"),
    "DynamicGradScaler": (".megatron_scalers", "DynamicGradScaler"),
    "MegatronGradScaler": (".megatron_scalers", "MegatronGradScaler"),
    "MegatronGradientProcessor": (".mixed_precision", "MegatronGradientProcessor"),
    "MegatronMixedPrecisionOptimizer": (".mixed_precision", "MegatronMixedPrecisionOptimizer"),
    "loss_scale_manager_from_flag": (".flags", "loss_scale_manager_from_flag"),
    "LossScaleHook": (".hooks", "LossScaleHook"),
    "OverflowStatusClearHook": (".hooks", "OverflowStatusClearHook"),
    "WarmupDecaySchedule": (".schedules", "WarmupDecaySchedule"),
    "warmup_decay_learning_rate": (".schedules", "warmup_decay_learning_rate"),
    "OptimizerParamScheduler": (".schedules", "OptimizerParamScheduler"),
    "ParamGroupOptimizer": (".schedules", "ParamGroupOptimizer"),
    "ParamGroupOverride": (".schedules", "ParamGroupOverride"),
    "combine_param_group_overrides": (".schedules", "combine_param_group_overrides"),
    "param_group_override_to_tuple": (".schedules", "param_group_override_to_tuple"),
    "GradScaler": (".frontends", "GradScaler"),
    "OptimizerThread": (".frontends", "OptimizerThread"),
    # warning categories, for warnings.filterwarnings (see npu_loss_scale._messages)
    "NpuLossScaleWarning": ("._messages", "NpuLossScaleWarning"),
    "LossScaleStuckWarning": ("._messages", "LossScaleStuckWarning"),
    "OverflowInvisibleWarning": ("._messages", "OverflowInvisibleWarning"),
    "RanksMayDivergeWarning": ("._messages", "RanksMayDivergeWarning"),
    "FusedKernelWarning": ("._messages", "FusedKernelWarning"),
}

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
    "NpuLossScaleWarning", "LossScaleStuckWarning", "OverflowInvisibleWarning",
    "RanksMayDivergeWarning", "FusedKernelWarning",
]


def __getattr__(name):
    # Names are imported from their submodule on first use (see the module docstring); so is any
    # submodule reached as an attribute (``nls.keras``, ``nls.optimizer``) before being imported.
    if name in _EXPORTS:
        module_name, attr = _EXPORTS[name]
        value = importlib.import_module(module_name, __name__)
        if attr is not None:
            value = getattr(value, attr)
        globals()[name] = value
        return value
    if not name.startswith("__") and importlib.util.find_spec("." + name, __name__) is not None:
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
