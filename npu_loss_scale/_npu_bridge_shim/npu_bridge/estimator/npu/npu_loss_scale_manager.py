"""Shim of ``npu_bridge.estimator.npu.npu_loss_scale_manager``: npu_loss_scale's managers."""
from npu_loss_scale.scaling.managers import ExponentialUpdateLossScaleManager, FixedLossScaleManager, LossScaleManager

__all__ = ["LossScaleManager", "FixedLossScaleManager", "ExponentialUpdateLossScaleManager"]
