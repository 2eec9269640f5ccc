"""CPU shim of Huawei's ``hccl`` package (rank helpers only); see npu_bridge in this folder."""
__npu_loss_scale_shim__ = True
