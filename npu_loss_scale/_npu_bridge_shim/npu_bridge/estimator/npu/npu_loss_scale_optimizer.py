"""Shim of ``npu_bridge.estimator.npu.npu_loss_scale_optimizer``: npu_loss_scale's optimizer."""
from npu_loss_scale.optimizer import NPULossScaleOptimizer

__all__ = ["NPULossScaleOptimizer"]
