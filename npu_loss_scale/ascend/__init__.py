"""Support for running Ascend scripts on CPU: the device's ``precision_mode`` (see
:mod:`npu_loss_scale.device.precision`). Used by ``python -m npu_loss_scale.emulate`` and its
npu_bridge shim; importing it needs TensorFlow only."""
