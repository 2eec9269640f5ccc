"""Shim of ``npu_bridge.estimator.npu.npu_callbacks``: Keras callbacks of the adapter."""
from npu_bridge import _ranks
from npu_bridge._shim import module_getattr as _module_getattr


def _callback_base():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.keras.callbacks.Callback


class NPUBroadcastGlobalVariablesCallback(_callback_base()):
    """Broadcasts rank ``root_rank``'s weights when training starts: a no-op with one rank.

    With RANK_SIZE > 1, NotImplementedError when training starts (no HCCL on CPU).
    """

    def __init__(self, root_rank=0):
        super().__init__()
        self.root_rank = root_rank

    def on_train_begin(self, logs=None):
        _ranks.require_single_rank("NPUBroadcastGlobalVariablesCallback")


__all__ = ["NPUBroadcastGlobalVariablesCallback"]
__getattr__ = _module_getattr(__name__, __all__)
