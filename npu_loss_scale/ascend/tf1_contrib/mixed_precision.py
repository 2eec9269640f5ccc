"""``tf.contrib.mixed_precision``: this package's loss-scale managers and an inf/NaN-checking
``LossScaleOptimizer``."""
import tensorflow as tf

from npu_loss_scale.ascend.tf1_contrib._namespace import _ns


def _mixed_precision():
    """``tf.contrib.mixed_precision``: TF 1.15's loss-scale managers and optimizer.

    The managers are this package's (the same arguments and defaults as contrib's, which
    Ascend's were made from). contrib's ``LossScaleOptimizer(opt, loss_scale_manager)`` checks the
    gradients themselves for inf/NaN and skips the update when any is not finite, whatever the
    manager: :class:`npu_loss_scale.NPULossScaleOptimizer` with ``backend="inf_nan"``, which
    behaves so (and warns when the emulated device saturates instead of producing inf/NaN, as
    contrib's optimizer on the device would not see those overflows either).
    """
    from npu_loss_scale.optimizers import loss_scale  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.scaling import (  # pylint: disable=import-outside-toplevel
        managers as scaling)

    class LossScaleOptimizer(loss_scale.NPULossScaleOptimizer):
        """``tf.contrib.mixed_precision.LossScaleOptimizer``: gradients checked for inf/NaN."""

        def __init__(self, opt, loss_scale_manager):
            super().__init__(opt, loss_scale_manager, backend="inf_nan")

    managers = dict(LossScaleManager=scaling.LossScaleManager,
                    FixedLossScaleManager=scaling.FixedLossScaleManager,
                    ExponentialUpdateLossScaleManager=scaling.ExponentialUpdateLossScaleManager)
    path = "tensorflow.contrib.mixed_precision.python"
    python = _ns(path,
                 loss_scale_manager=_ns(path + ".loss_scale_manager", **managers),
                 loss_scale_optimizer=_ns(path + ".loss_scale_optimizer",
                                          LossScaleOptimizer=LossScaleOptimizer))
    return _ns("tf.contrib.mixed_precision", python=python,
               LossScaleOptimizer=LossScaleOptimizer, **managers)


__all__ = []
