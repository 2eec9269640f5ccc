"""Pure-Python twins of the loss-scale rules, one per family (Ascend's managers, Megatron's
scalers, torch's GradScaler); they import nothing of the package and check it step for step."""
__all__ = []  # a namespace: see its modules
