"""Shim of ``npu_bridge.estimator.npu.npu_optimizer``: gradient averaging over the ranks.

At one rank the gradient all-reduce (average over ranks) is the identity, as on the device. In a
rank of ``python -m npu_loss_scale.emulate --ranks N`` the gradients are averaged over the N
processes: TF1 optimizers through ``hccl_ops.allreduce`` in the graph, Keras optimizers
(``npu_distributed_optimizer_wrapper``, ``KerasDistributeOptimizer``) where their apply runs
(see :mod:`npu_bridge._keras_ranks`). With RANK_SIZE > 1 outside such a run, NotImplementedError.
"""
import tensorflow as tf

from npu_bridge import _ranks
from npu_bridge._allreduce import allreduce
from npu_bridge._shim import module_getattr as _module_getattr
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer

npu_allreduce = allreduce


class NPUDistributedOptimizer(tf.compat.v1.train.Optimizer):
    """Gradient all-reduce over the ranks: with the single emulated rank, the inner optimizer.

    With RANK_SIZE > 1 the gradients are averaged with ``hccl_ops.allreduce`` (TF collective ops
    in a ``--ranks N`` run; NotImplementedError without one).
    """

    def __init__(self, optimizer, is_weight_update_sharding=False, name=None):
        if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
            raise TypeError("optimizer must be a tf.compat.v1.train.Optimizer; got %r"
                            % (optimizer,))
        # the adapter's default name: "Distributed" and the wrapped optimizer's class name (not
        # its get_name(): optimizers that never call Optimizer.__init__ have none)
        super().__init__(use_locking=False,
                         name=name or "Distributed" + type(optimizer).__name__)
        self._optimizer = optimizer
        self.is_weight_update_sharding = bool(is_weight_update_sharding)

    def compute_gradients(self, *args, **kwargs):
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        if _ranks.rank_size() <= 1:
            return gradients
        with tf.name_scope(self.get_name() + "_Allreduce"):
            return [(None if g is None else allreduce(g, True), v) for g, v in gradients]

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


def npu_distributed_optimizer_wrapper(optimizer):
    """The optimizer with its gradients averaged over the ranks (at one rank: ``optimizer``).

    A TF1 optimizer is wrapped in :class:`NPUDistributedOptimizer`. A Keras optimizer is returned
    as the same object; at several emulated ranks (where a name such as ``"sgd"`` is looked up
    first, as the device does) its gradients are all-reduced (mean) before they are applied:
    Keras 2 through its ``apply_gradients`` (which ``model.fit`` reaches in a TF1 Keras session
    and eagerly), Keras 3 through ``apply``.
    """
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return NPUDistributedOptimizer(optimizer)
    from npu_bridge import _keras_ranks  # pylint: disable=import-outside-toplevel
    if _keras_ranks.cluster("npu_distributed_optimizer_wrapper") is None:
        return optimizer
    return _keras_ranks.distribute_keras_optimizer(optimizer, "npu_distributed_optimizer_wrapper")


def KerasDistributeOptimizer(optimizer):  # pylint: disable=invalid-name
    """A Keras optimizer with its gradients averaged over the ranks before they are applied:
    at one rank, ``optimizer`` itself; at several, the same object with its apply patched (the
    device returns a new wrapping optimizer; its gradients are the same)."""
    from npu_bridge import _keras_ranks  # pylint: disable=import-outside-toplevel
    if _keras_ranks.cluster("KerasDistributeOptimizer") is None:
        return optimizer
    return _keras_ranks.distribute_keras_optimizer(optimizer, "KerasDistributeOptimizer")


__all__ = ["NPUDistributedOptimizer", "NPUOptimizer", "allreduce", "npu_allreduce",
           "npu_distributed_optimizer_wrapper", "KerasDistributeOptimizer"]
__getattr__ = _module_getattr(__name__, __all__)
