"""Stand-in of npu_bridge.helper.helper: float-status ops on the emulated register, logged."""
import tensorflow as tf

import npu_bridge
from npu_loss_scale.device import register as emulation


def _op_of(result):
    return result if isinstance(result, tf.Operation) else result.op


def _logged(name, build):
    def op(*args, **kwargs):
        result = build(*args, **kwargs)
        npu_bridge.LOG.append((name, _op_of(result)))
        return result
    op.__name__ = name
    return op


class _GenOps:
    npu_alloc_float_status = staticmethod(_logged("npu_alloc_float_status",
                                                  emulation.npu_alloc_float_status))
    npu_get_float_status = staticmethod(_logged("npu_get_float_status",
                                                emulation.npu_get_float_status))
    npu_clear_float_status = staticmethod(_logged("npu_clear_float_status",
                                                  emulation.npu_clear_float_status))
    npu_get_float_status_v2 = staticmethod(_logged("npu_get_float_status_v2",
                                                   emulation.npu_get_float_status_v2))
    npu_clear_float_status_v2 = staticmethod(_logged("npu_clear_float_status_v2",
                                                     emulation.npu_clear_float_status_v2))


def get_gen_ops():
    return _GenOps
