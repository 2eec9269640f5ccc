"""Layer 1, the loss-scale rules: Ascend's managers (:mod:`.managers`), Megatron's grad scalers
(:mod:`.megatron`), the unscale arithmetic (:mod:`.unscale`), and beside them their pure-Python
reference twins (:mod:`.reference`), which share no code with them."""
__all__ = []  # a namespace: see its modules
