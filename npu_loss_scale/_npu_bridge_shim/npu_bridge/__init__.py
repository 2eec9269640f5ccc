"""CPU shim of Huawei's ``npu_bridge`` (Ascend TF adapter) from npu-loss-scale.

``python -m npu_loss_scale.emulate script.py`` puts the folder holding this package at the end of
``sys.path`` when no real ``npu_bridge`` is importable, so an unmodified Ascend script's imports of
the loss-scale API resolve to :mod:`npu_loss_scale`:

* ``npu_bridge.npu_init`` (``from npu_bridge.npu_init import *``)
* ``npu_bridge.estimator.npu.npu_loss_scale_optimizer.NPULossScaleOptimizer``
* ``npu_bridge.estimator.npu.npu_loss_scale_manager``: ``LossScaleManager``,
  ``FixedLossScaleManager``, ``ExponentialUpdateLossScaleManager``
* ``npu_bridge.estimator.npu.npu_optimizer``: ``NPUDistributedOptimizer``, ``NPUOptimizer``,
  the distributed wrappers (one rank, or the N ranks of ``emulate --ranks N``)
* ``npu_bridge.estimator.npu.npu_plugin``: ``set_device_sat_mode``, ``is_inf_nan_enabled``
* ``npu_bridge.helper.helper.get_gen_ops()``: the emulated float-status ops and the device
  kernels shared with ``npu_device.gen_npu_ops`` (dropout masks, FastGelu)
* ``npu_bridge.hccl.hccl_ops``: ``allreduce``, ``broadcast``, ``allgather``, ``reduce_scatter``
  (one rank, or TF collective ops across the N ranks of ``emulate --ranks N``)
* ``npu_bridge.npu_cpu.npu_cpu_ops.randomchoicewithmask`` (the AI-CPU RandomChoiceWithMask)

and the rest of the surface real scripts use (``NPUEstimator``, ``NPURunConfig``, ``npu_ops``,
session-config helpers, ...; the table in docs/ascend-surface.md). Anything else of the adapter
raises an error saying it is not emulated. The package
is marked as a shim, so :func:`npu_loss_scale.detection.get_backend_name` keeps choosing the
``emulation`` backend. It never takes the place of a real npu_bridge.
"""
__npu_loss_scale_shim__ = True

from npu_bridge._shim import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, package=True)
