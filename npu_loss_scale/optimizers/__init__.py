"""Layer 4, the TF1 optimizers: :class:`~npu_loss_scale.NPULossScaleOptimizer`
(:mod:`.loss_scale`, with gradient accumulation) and Megatron's mixed-precision optimizer
(:mod:`.megatron`). Each runs one training step through :mod:`npu_loss_scale.detection`."""
__all__ = []  # a namespace: see its modules
