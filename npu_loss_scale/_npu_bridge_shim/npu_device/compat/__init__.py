"""Shim of ``npu_device.compat``: ``enable_v1()`` and ``compat.v1.npu_init``."""
from npu_bridge._shim import module_getattr as _module_getattr


def enable_v1():
    """TF1 graph behaviour for the rest of the process, as the adapter's switch does."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.compat.v1.disable_v2_behavior()


__all__ = ["enable_v1"]
__getattr__ = _module_getattr(__name__, __all__, package=True)
