"""Layer 7, the command lines: ``python -m npu_loss_scale.emulate`` / ``npu-emulate``
(:mod:`.emulate`), ``python -m npu_loss_scale`` / ``npu-loss-scale`` (:mod:`npu_loss_scale.__main__`)
and its environment report (:mod:`.env_report`)."""
__all__ = []  # a namespace: see its modules
