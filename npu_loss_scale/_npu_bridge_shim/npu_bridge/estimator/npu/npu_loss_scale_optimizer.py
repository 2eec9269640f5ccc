"""Shim of ``npu_bridge.estimator.npu.npu_loss_scale_optimizer``.

``NPULossScaleOptimizer`` is npu_loss_scale's, with the device's one-rank behaviour: with
``is_distributed=True`` and a single rank (RANK_SIZE unset or 1), the all-reduce of the overflow
status is the identity on the device, so the status is used as is (no agreement layer is
needed). The real module also makes the loss-scale managers importable from here.
"""
from npu_loss_scale import optimizer as _optimizer
from npu_loss_scale.policy import (ExponentialUpdateLossScaleManager, FixedLossScaleManager,  # noqa: F401
                                   LossScaleManager)

from npu_bridge import _ranks


class NPULossScaleOptimizer(_optimizer.NPULossScaleOptimizer):
    """:class:`npu_loss_scale.NPULossScaleOptimizer`; ``is_distributed=True`` at one rank is the
    device's identity all-reduce (``requested_distributed`` keeps what the script asked for)."""

    def __init__(self, opt, loss_scale_manager, is_distributed=False, **kwargs):
        self.requested_distributed = is_distributed
        if is_distributed is True and _ranks.rank_size() == 1:
            is_distributed = False
        super().__init__(opt, loss_scale_manager, is_distributed, **kwargs)


__all__ = ["NPULossScaleOptimizer", "LossScaleManager", "FixedLossScaleManager",
           "ExponentialUpdateLossScaleManager"]
