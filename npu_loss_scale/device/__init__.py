"""Layer 1, the Ascend device's overflow behaviour modelled on the CPU: the sticky float-status
register (:mod:`.register`, public as ``npu_loss_scale.device.register``), saturation arithmetic on
every op (:mod:`.saturation`), the ``precision_mode`` options (:mod:`.precision`,
:mod:`.precision_modes`) and where an overflow happened (:mod:`.localisation`)."""
__all__ = []  # a namespace: see its modules
