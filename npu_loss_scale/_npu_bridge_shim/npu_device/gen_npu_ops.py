"""Shim of ``npu_device.gen_npu_ops`` (the TF2 adapter's raw device op library): the kernels
Ascend's TF2 scripts call, computed on CPU by :mod:`npu_loss_scale.ascend.device_kernels`.

* ``drop_out_gen_mask(shape, prob, seed=0, seed2=0, name=None)``: uint8 bit mask, one bit per
  element padded to 128 bits (``ceil(n/128)*16`` bytes), element ``i`` = bit ``i % 8`` of byte
  ``i // 8``, 1 (keep) with probability ``prob``;
* ``drop_out_do_mask(x, mask, keep_prob, name=None)``: ``x / keep_prob`` where the bit is 1,
  else 0, in x's dtype (float16/float32; keep_prob in that dtype);
* ``drop_out_gen_mask_v3`` / ``drop_out_do_mask_v3``: the byte-mask variants (fractal order for
  ``[*batch, M, N]`` with M, N multiples of 16);
* ``fast_gelu(features)``, ``fast_gelu_grad(gradients, features)``: the device's FastGelu
  ``x * sigmoid(1.702 x)`` and its derivative.

Seeds ``(0, 0)`` draw a fresh stream; any other pair a fixed one (TensorFlow's generator, not
the device's numbers). Every op is made of TensorFlow ops: eager, ``tf.function`` and graphs
work and autodiff gives the device's gradients; no op of a device type is created, so gradients
a script registers for ``DropOutDoMask``/``FastGelu`` are never used. Every other name of the
library (fused optimizers, LSTM/GRU cells, LARS, layer norm, ...) raises
:class:`NotEmulatedError` naming it.
"""
from npu_bridge._shim import module_getattr as _module_getattr
from npu_loss_scale.ascend.device_kernels import (  # noqa: F401
    drop_out_do_mask, drop_out_do_mask_v3, drop_out_gen_mask, drop_out_gen_mask_v3, fast_gelu,
    fast_gelu_grad)

__all__ = ["drop_out_gen_mask", "drop_out_do_mask", "drop_out_gen_mask_v3",
           "drop_out_do_mask_v3", "fast_gelu", "fast_gelu_grad"]
__getattr__ = _module_getattr(__name__, __all__)
