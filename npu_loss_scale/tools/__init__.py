"""Layer 5, tools over a built graph: the loss-scale advisor (:mod:`.advisor`)."""
__all__ = []  # a namespace: see its modules
