"""Layer 6, what unmodified Ascend scripts need on a CPU: the BERT loss-scale flag
(:mod:`.flags`), ranks on one machine (:mod:`.ranks`), iterations per loop (:mod:`.loops`), the
device's own kernels (:mod:`.device_kernels`), TensorFlow-version compatibility for TF1 and
TF 2.4 scripts (:mod:`.tf1`, :mod:`.tf1_contrib`, :mod:`.tf1_mnist`, :mod:`.tf24`), and the CPU
shim of ``npu_bridge``, ``npu_device``, ``hccl`` and ``moxing`` (the folder ``_npu_bridge_shim``
beside this one, put on ``sys.path`` by ``python -m npu_loss_scale.emulate``)."""
__all__ = []  # a namespace: see its modules
