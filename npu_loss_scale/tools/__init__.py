"""Layer 5, tools over a built graph: the loss-scale advisor (:mod:`.advisor`) and graph checks
(:mod:`.graph_checks`: the collectives a train op runs)."""
__all__ = []  # a namespace: see its modules
