"""Shim of ``npu_bridge.estimator.npu.npu_callbacks``: Keras callbacks of the adapter."""
import numbers

from npu_bridge import _ranks
from npu_bridge._shim import module_getattr as _module_getattr


def _callback_base():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.keras.callbacks.Callback


class NPUBroadcastGlobalVariablesCallback(_callback_base()):
    """Gives every rank rank ``root_rank``'s weights before the first training batch.

    As on the device, the broadcast happens once, when the first batch begins (so Keras has
    built and initialised the model by then): with one rank nothing is done; in a rank of
    ``python -m npu_loss_scale.emulate --ranks N`` the model's variables (``model.variables``,
    trainable or not) take rank ``root_rank``'s values: in a TF1 Keras session through
    ``hccl_ops.broadcast``, in TF2 code eagerly (see :mod:`npu_bridge._keras_ranks`). With
    RANK_SIZE > 1 outside such a run, NotImplementedError at that first batch.
    """

    def __init__(self, root_rank=0):
        super().__init__()
        if isinstance(root_rank, bool) or not isinstance(root_rank, numbers.Integral) \
                or root_rank < 0:
            raise ValueError("NPUBroadcastGlobalVariablesCallback: root_rank must be an int >= 0 "
                             "(the rank whose weights every rank takes); got %r" % (root_rank,))
        self.root_rank = int(root_rank)
        self.broadcast_done = False

    def on_batch_begin(self, batch, logs=None):
        if self.broadcast_done:
            return
        from npu_bridge import _keras_ranks  # pylint: disable=import-outside-toplevel
        what = "NPUBroadcastGlobalVariablesCallback"
        if _keras_ranks.cluster(what) is not None:
            if self.root_rank >= _ranks.rank_size():
                raise ValueError("%s: root_rank must be an int in [0, RANK_SIZE=%d); got %r"
                                 % (what, _ranks.rank_size(), self.root_rank))
            _keras_ranks.broadcast_variables(self.model.variables, self.root_rank, what)
        self.broadcast_done = True


__all__ = ["NPUBroadcastGlobalVariablesCallback"]
__getattr__ = _module_getattr(__name__, __all__)
