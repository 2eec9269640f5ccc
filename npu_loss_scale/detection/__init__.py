"""Layer 3, overflow detection: which backend answers "did anything overflow since the last
clear?" (the device's float-status register through npu_bridge, its CPU emulation, or an IEEE
inf/NaN test; :mod:`.backends`), which gradient values count as overflowed (:mod:`.flags`) and
one training step's read, agreement and end (:mod:`.step`)."""
from npu_loss_scale.detection.backends import (  # noqa: F401
    BACKEND_NAMES, ENV_VAR, get_backend_name, make_detector, clear_overflow_status,
    OverflowDetector, InfNanDetector, EmulationDetector, NpuDetector,
    npu_bridge_available, is_shim, SHIM_MARKER)
from npu_loss_scale.detection.flags import Unscaled, nonfinite_flag  # noqa: F401

__all__ = [
    "BACKEND_NAMES", "ENV_VAR", "get_backend_name", "make_detector", "clear_overflow_status",
    "OverflowDetector", "InfNanDetector", "EmulationDetector", "NpuDetector", "Unscaled",
    "nonfinite_flag", "npu_bridge_available", "is_shim", "SHIM_MARKER",
]
