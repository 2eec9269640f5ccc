"""The device's ``precision_mode`` values, in a module that needs no TensorFlow (the command
line lists them in its help; :mod:`npu_loss_scale.device.precision` applies them), and the switch
that turns their emulation off for a plain run."""
import os

PRECISION_MODES = ("allow_fp32_to_fp16", "force_fp16", "force_fp32", "allow_mix_precision",
                   "must_keep_origin_dtype", "cube_fp16in_fp32out", "allow_mix_precision_fp16",
                   "allow_mix_precision_bf16", "allow_fp32_to_bf16", "force_lowerprecision")

#: Set to ``1`` by ``npu-emulate --plain`` (and inherited by the script's children): no
#: ``precision_mode`` is applied, so sessions and ``npu_device`` run the script's float32 as
#: written. The baseline the emulated device's cost is measured against.
PLAIN_ENV_VAR = "NPU_LOSS_SCALE_PLAIN"


def plain_run():
    """Whether this process runs plain (:data:`PLAIN_ENV_VAR` set to anything but ``0``):
    installing the session hook or the TF2 op precision then does nothing."""
    return os.environ.get(PLAIN_ENV_VAR, "").strip() not in ("", "0")


__all__ = [
    "PRECISION_MODES", "PLAIN_ENV_VAR", "plain_run",
]
