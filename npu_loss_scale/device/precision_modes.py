"""The device's ``precision_mode`` values, in a module that needs no TensorFlow (the command
line lists them in its help; :mod:`npu_loss_scale.device.precision` applies them)."""

PRECISION_MODES = ("allow_fp32_to_fp16", "force_fp16", "force_fp32", "allow_mix_precision",
                   "must_keep_origin_dtype", "cube_fp16in_fp32out", "allow_mix_precision_fp16",
                   "allow_mix_precision_bf16", "allow_fp32_to_bf16", "force_lowerprecision")


__all__ = [
    "PRECISION_MODES",
]
