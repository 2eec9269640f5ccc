"""Shim of ``npu_bridge.estimator.npu.npu_optimizer`` for a single emulated rank."""
import tensorflow as tf

from npu_loss_scale.optimizer import NPULossScaleOptimizer
from npu_bridge import _ranks


class NPUDistributedOptimizer(tf.compat.v1.train.Optimizer):
    """Gradient all-reduce over the ranks: with the single emulated rank, the inner optimizer.

    Raises NotImplementedError when gradients are computed with RANK_SIZE > 1 (no HCCL on CPU).
    """

    def __init__(self, optimizer, name=None, **unused_npu_options):
        if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
            raise TypeError("optimizer must be a tf.compat.v1.train.Optimizer; got %r"
                            % (optimizer,))
        super().__init__(use_locking=False, name=name or "NPUDistributed" + optimizer.get_name())
        self._optimizer = optimizer

    def compute_gradients(self, *args, **kwargs):
        _ranks.require_single_rank("NPUDistributedOptimizer")
        return self._optimizer.compute_gradients(*args, **kwargs)

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._optimizer.variables()


def NPUOptimizer(opt, loss_scale_manager=None, is_distributed=False, is_loss_scale=False,  # pylint: disable=invalid-name
                 is_tailing_optimization=False, name=None):  # pylint: disable=unused-argument
    """The adapter's all-in-one wrapper: distribution and/or loss scaling, on one emulated rank.

    Returns ``NPULossScaleOptimizer(opt, loss_scale_manager, ...)`` when ``is_loss_scale``, else
    ``opt`` (wrapped in NPUDistributedOptimizer when ``is_distributed``).
    """
    if is_distributed:
        opt = NPUDistributedOptimizer(opt)
    if not is_loss_scale:
        return opt
    if loss_scale_manager is None:
        raise ValueError("NPUOptimizer(is_loss_scale=True) needs loss_scale_manager, a "
                         "FixedLossScaleManager or ExponentialUpdateLossScaleManager; got None")
    return NPULossScaleOptimizer(opt, loss_scale_manager,
                                 is_distributed=bool(is_distributed) and _ranks.rank_size() > 1,
                                 name=name)
