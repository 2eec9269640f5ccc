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
import importlib.abc
import importlib.machinery
import sys
from typing import TYPE_CHECKING

__version__ = "0.2.0"

# public name -> (submodule, attribute in it; None = the submodule itself)
_EXPORTS = {
    "emulation": (".device.register", None),
    "saturation": (".device.saturation", None),
    "BACKEND_NAMES": (".detection", "BACKEND_NAMES"),
    "BACKEND_ENV_VAR": (".detection", "ENV_VAR"),
    "clear_overflow_status": (".detection", "clear_overflow_status"),
    "get_backend_name": (".detection", "get_backend_name"),
    "get_device_sat_mode": (".device.register", "get_device_sat_mode"),
    "is_inf_nan_enabled": (".device.register", "is_inf_nan_enabled"),
    "saturate": (".device.register", "saturate"),
    "set_device_sat_mode": (".device.register", "set_device_sat_mode"),
    "NPULossScaleOptimizer": (".optimizers.loss_scale", "NPULossScaleOptimizer"),
    "ExponentialUpdateLossScaleManager": (".scaling.managers", "ExponentialUpdateLossScaleManager"),
    "FixedLossScaleManager": (".scaling.managers", "FixedLossScaleManager"),
    "LossScaleManager": (".scaling.base", "LossScaleManager"),
    "ConstantGradScaler": (".scaling.megatron", "ConstantGradScaler"),
    "DynamicGradScaler": (".scaling.megatron", "DynamicGradScaler"),
    "MegatronGradScaler": (".scaling.megatron", "MegatronGradScaler"),
    "MegatronGradientProcessor": (".optimizers.megatron_gradients", "MegatronGradientProcessor"),
    "MegatronMixedPrecisionOptimizer": (".optimizers.megatron", "MegatronMixedPrecisionOptimizer"),
    "loss_scale_manager_from_flag": (".ascend.flags", "loss_scale_manager_from_flag"),
    "LossScaleHook": (".frontends.hooks", "LossScaleHook"),
    "OverflowStatusClearHook": (".frontends.hooks", "OverflowStatusClearHook"),
    "WarmupDecaySchedule": (".schedules", "WarmupDecaySchedule"),
    "warmup_decay_learning_rate": (".schedules", "warmup_decay_learning_rate"),
    "OptimizerParamScheduler": (".schedules", "OptimizerParamScheduler"),
    "ParamGroupOptimizer": (".schedules", "ParamGroupOptimizer"),
    "ParamGroupOverride": (".schedules", "ParamGroupOverride"),
    "combine_param_group_overrides": (".schedules", "combine_param_group_overrides"),
    "param_group_override_to_tuple": (".schedules", "param_group_override_to_tuple"),
    "GradScaler": (".frontends", "GradScaler"),
    "OptimizerThread": (".frontends", "OptimizerThread"),
    "StepReport": ("._internal.report", "StepReport"),
    # errors and warning categories (for except clauses and warnings.filterwarnings)
    "AgreementError": (".agreement", "AgreementError"),
    "NoInfChecksError": (".frontends", "NoInfChecksError"),
    "NpuLossScaleWarning": ("._internal.messages", "NpuLossScaleWarning"),
    "LossScaleStuckWarning": ("._internal.messages", "LossScaleStuckWarning"),
    "OverflowInvisibleWarning": ("._internal.messages", "OverflowInvisibleWarning"),
    "RanksMayDivergeWarning": ("._internal.messages", "RanksMayDivergeWarning"),
    "FusedKernelWarning": ("._internal.messages", "FusedKernelWarning"),
}

__all__ = list(_EXPORTS)

if TYPE_CHECKING:  # what editors and type checkers see; the names load lazily (below)
    from npu_loss_scale.device import register as emulation
    from npu_loss_scale.device import saturation
    from npu_loss_scale.device.register import (  # noqa: F401
        get_device_sat_mode, is_inf_nan_enabled, saturate, set_device_sat_mode)
    from npu_loss_scale.detection import (  # noqa: F401
        BACKEND_NAMES, ENV_VAR as BACKEND_ENV_VAR, clear_overflow_status, get_backend_name)
    from npu_loss_scale.optimizers.loss_scale import (  # noqa: F401
        NPULossScaleOptimizer)
    from npu_loss_scale.scaling.base import LossScaleManager  # noqa: F401
    from npu_loss_scale.scaling.managers import (  # noqa: F401
        ExponentialUpdateLossScaleManager, FixedLossScaleManager)
    from npu_loss_scale.scaling.megatron import (  # noqa: F401
        ConstantGradScaler, DynamicGradScaler, MegatronGradScaler)
    from npu_loss_scale.optimizers.megatron import (  # noqa: F401
        MegatronMixedPrecisionOptimizer)
    from npu_loss_scale.optimizers.megatron_gradients import (  # noqa: F401
        MegatronGradientProcessor)
    from npu_loss_scale.ascend.flags import (  # noqa: F401
        loss_scale_manager_from_flag)
    from npu_loss_scale.frontends.hooks import (  # noqa: F401
        LossScaleHook, OverflowStatusClearHook)
    from npu_loss_scale.schedules import (  # noqa: F401
        WarmupDecaySchedule, warmup_decay_learning_rate, OptimizerParamScheduler,
        ParamGroupOptimizer, ParamGroupOverride, combine_param_group_overrides,
        param_group_override_to_tuple)
    from npu_loss_scale.frontends import (  # noqa: F401
        GradScaler, OptimizerThread, NoInfChecksError)
    from npu_loss_scale._internal.report import StepReport  # noqa: F401
    from npu_loss_scale.agreement import (  # noqa: F401
        AgreementError)
    from npu_loss_scale._internal.messages import (  # noqa: F401
        NpuLossScaleWarning, LossScaleStuckWarning, OverflowInvisibleWarning,
        RanksMayDivergeWarning, FusedKernelWarning)


def __getattr__(name):
    # Names are imported from their submodule on first use (see the module docstring). A
    # submodule is an attribute once imported, as in any package; nothing else is public here.
    if name in _EXPORTS:
        module_name, attr = _EXPORTS[name]
        value = importlib.import_module(module_name, __name__)
        if attr is not None:
            value = getattr(value, attr)
        globals()[name] = value
        return value
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


class _OldPaths(importlib.abc.MetaPathFinder):
    """Serves the old import paths of modules moved in 0.3 (``npu_loss_scale._internal.moved``).

    First on ``sys.meta_path``; it lets every module of today's layout load as usual and imports
    the table of old paths only when a name is not one of them, or is a submodule of an old
    package path (``npu_loss_scale._compat.ops``: found there, it would load a second time).
    A namespace package found under a name does not count as a module of today's layout.
    """

    def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
        if not fullname.startswith(__name__ + "."):
            return None
        parent = fullname.rpartition(".")[0]
        parent_module = sys.modules.get(parent)
        if parent_module is None or parent_module.__name__ == parent:
            found = importlib.machinery.PathFinder.find_spec(fullname, path)
            # a file of today's layout; not a folder left without files, which imports as an
            # empty namespace package (an old package path's __pycache__ after an update)
            if found is not None and found.has_location:
                return None
        from npu_loss_scale._internal import moved  # pylint: disable=import-outside-toplevel
        return moved.find_spec(fullname)


if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
    sys.meta_path.insert(0, _OldPaths())


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
