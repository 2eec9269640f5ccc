"""TF2 front ends: :class:`GradScaler` (torch's interface, with an optional
:class:`OptimizerThread`) and, in :mod:`npu_loss_scale.keras`, the Keras ``NpuLossScaleOptimizer``.

Both detect overflow through the package's backends (status register, its emulation, inf/NaN)
and agree across ranks through :mod:`npu_loss_scale.agreement`.
"""
from npu_loss_scale.frontends.grad_scaler import GradScaler, NoInfChecksError, OptState
from npu_loss_scale.frontends.optimizer_thread import OptimizerThread

__all__ = ["GradScaler", "OptimizerThread", "OptState", "NoInfChecksError"]
