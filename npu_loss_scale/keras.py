"""The Keras front end, ``from npu_loss_scale.keras import NpuLossScaleOptimizer``: Keras's
``LossScaleOptimizer`` with the Ascend device's overflow detection (Keras 2 and Keras 3). The
implementation is :mod:`npu_loss_scale.frontends.keras`; this path is the public one."""
from npu_loss_scale.frontends.keras import (  # noqa: F401
    DEFAULT_GROWTH_STEPS, DEFAULT_INITIAL_SCALE, NpuLossScaleOptimizer)

__all__ = ["NpuLossScaleOptimizer", "DEFAULT_INITIAL_SCALE", "DEFAULT_GROWTH_STEPS"]
