"""The Keras front end, ``from npu_loss_scale.keras import NpuLossScaleOptimizer``: Keras's
``LossScaleOptimizer`` with the Ascend device's overflow detection (Keras 2 and Keras 3). The
implementation is :mod:`npu_loss_scale.frontends.keras`; this path is the public one. The class
is built on first use, for the Keras this TensorFlow has (importing this module imports neither
TensorFlow's Keras nor the implementation)."""
import importlib

__all__ = ["NpuLossScaleOptimizer", "DEFAULT_INITIAL_SCALE", "DEFAULT_GROWTH_STEPS"]


def __getattr__(name):
    if name in __all__:
        return getattr(importlib.import_module("npu_loss_scale.frontends.keras"), name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def __dir__():
    return sorted(set(globals()) | set(__all__))
