"""Shim of ``npu_device.ops``: ``gelu(x)``, as the adapter defines it: TensorFlow's exact GELU
when executing eagerly, the device's FastGelu (``x * sigmoid(1.702 x)``, see
``npu_device.gen_npu_ops.fast_gelu``) in a graph or ``tf.function``. Any other name raises an
error saying it is not emulated."""
from npu_bridge._shim import module_getattr as _module_getattr


def gelu(x):
    """GELU activation: exact in eager execution, the device's FastGelu when traced."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.ascend import device_kernels  # pylint: disable=import-outside-toplevel
    if tf.executing_eagerly():
        return tf.nn.gelu(x, approximate=False)
    return device_kernels.fast_gelu(tf.convert_to_tensor(x))


__all__ = ["gelu"]
__getattr__ = _module_getattr(__name__, __all__, package=True)
