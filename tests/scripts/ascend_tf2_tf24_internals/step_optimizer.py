"""The shape of BertLarge's ``tf2_common/training/optimizer_v2modified.py``: an optimizer
written against TF 2.4/2.6 internals (``keras.optimizer_v2``, ``distribution_strategy_context``,
``ops.Tensor``/``IndexedSlices``/``convert_to_tensor_v2_with_dispatch``), all gone from those
places in TF 2.15."""
from keras.optimizer_v2 import optimizer_v2
from keras.optimizer_v2 import utils as optimizer_utils
from tensorflow.python.distribute import distribution_strategy_context as distribute_ctx
from tensorflow.python.framework import ops

SEEN = {}


class PlainSGD(optimizer_v2.OptimizerV2):
    """Gradient descent, as a TF 2.4 OptimizerV2 subclass."""

    def __init__(self, learning_rate=0.01, name="PlainSGD", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", learning_rate)

    def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
        grads_and_vars = optimizer_utils.filter_empty_gradients(grads_and_vars)
        SEEN["strategy"] = type(distribute_ctx.get_strategy()).__name__
        SEEN["cross_replica"] = bool(distribute_ctx.in_cross_replica_context())
        return super().apply_gradients(grads_and_vars, name,
                                       experimental_aggregate_gradients)

    def _resource_apply_dense(self, grad, var, apply_state=None):
        SEEN["dense_grad_is_tensor"] = isinstance(grad, ops.Tensor)
        SEEN["sparse_type"] = ops.IndexedSlices.__name__
        lr = ops.convert_to_tensor_v2_with_dispatch(self._get_hyper("learning_rate", var.dtype))
        return var.assign_sub(lr * grad)

    def get_config(self):
        config = super().get_config()
        config["learning_rate"] = self._serialize_hyperparameter("learning_rate")
        return config
