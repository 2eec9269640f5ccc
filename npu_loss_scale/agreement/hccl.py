"""Agreement ``hccl``: the sum over the HCCL world with ``npu_bridge`` (Ascend devices).

The adapter's ``hccl_ops`` comes from :func:`npu_loss_scale._internal.probe.npu_bridge_hccl_ops`
(the adapter's, or the emulator's shim handed to the probe by the layer that installed it).
"""
from npu_loss_scale._internal import probe as _probe
from npu_loss_scale.agreement.base import Agreement


class HcclAgreement(Agreement):
    """Sums the status over the HCCL world with ``npu_bridge``'s all-reduce (Ascend devices)."""

    name = "hccl"

    def __init__(self):
        try:
            self._ops = _probe.npu_bridge_hccl_ops()
        except ImportError as err:
            raise ImportError("agreement 'hccl' needs npu_bridge.hccl.hccl_ops (from Huawei's "
                              "CANN toolkit), which did not import: %s. Off the device use "
                              "agreement='horovod' or 'collective'." % err) from err

    def reduce(self, status):
        return self._ops.allreduce(status, "sum", fusion=0)

def hccl_ready(backend_name):
    """Whether ``npu_bridge`` HCCL can agree: the ``npu`` backend and an importable
    ``npu_bridge.hccl.hccl_ops``."""
    if backend_name != "npu":
        return False
    try:
        _probe.npu_bridge_hccl_ops()
    except ImportError:
        return False
    return True


__all__ = ["HcclAgreement", "hccl_ready"]
