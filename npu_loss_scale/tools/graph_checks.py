"""Checks on a built graph: how many collectives one run of a train op executes.

Used by the tests and benchmarks of the agreements (one status all-reduce per step, whatever the
number of gradients).
"""
import tensorflow as tf

from npu_loss_scale.agreement import COLLECTIVE_OP_TYPES


def count_collectives(fetches):
    """How many collective ops (TF collectives, NCCL, Horovod, HCCL) one run of ``fetches``
    executes at most: the collectives among their ancestors in the graph, including those inside
    functions such as ``tf.cond`` branches (the larger branch counts).

    Example::

        train_op = opt.minimize(loss)
        assert count_collectives(train_op) == 1      # the status all-reduce, however many grads
    """
    flat = [f.op if isinstance(f, tf.Tensor) else f for f in tf.nest.flatten(fetches)]
    if not flat:
        return 0
    library = {f.signature.name: f for f in flat[0].graph.as_graph_def().library.function}
    memo = {}

    def in_function(name):
        if name not in memo:
            memo[name] = 0  # guards against recursion
            fdef = library.get(name)
            memo[name] = 0 if fdef is None else sum(
                _node_collectives(n.op, n.attr) for n in fdef.node_def)
        return memo[name]

    def _node_collectives(op_type, attrs):
        count = 1 if op_type in COLLECTIVE_OP_TYPES else 0
        branches = []
        for key in attrs:
            value = attrs[key]
            names = [value.func.name] if value.func.name else []
            names += [f.name for f in value.list.func]
            counts = [in_function(n) for n in names]
            if key in ("then_branch", "else_branch", "branches"):
                branches.extend(counts)
            else:
                count += sum(counts)
        return count + (max(branches) if branches else 0)

    stack, seen, total = list(flat), set(), 0
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        total += _node_collectives(op.type, op.node_def.attr)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return total


__all__ = ["count_collectives"]
