"""Graph helpers shared by the tests."""


def ancestors(tensors_or_ops):
    """Every op that the given tensors or ops depend on (data and control edges), themselves
    included."""
    seen, stack = set(), [getattr(t, "op", t) for t in tensors_or_ops]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen
