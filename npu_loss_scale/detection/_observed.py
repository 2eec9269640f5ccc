"""Which gradients ``compute_gradients`` already checked, so ``apply_gradients`` reads them free.

``NPULossScaleOptimizer.compute_gradients`` checks the *scaled* gradients (one read pass, or none
on the device's register) and unscales them. Between it and ``apply_gradients`` the user may clip
or otherwise process the gradients. ``apply_gradients`` must not check them a second time, yet
must check anything that did not come from that check (say an accumulator variable).

So ``compute_gradients`` leaves a mark on the graph being built, per variable: the check that
covered its gradient, and the gradient it returned. ``apply_gradients`` then sorts its gradients:

- the very gradient that was returned: covered;
- a gradient computed from it in this graph (clipped, scaled...): covered (one graph walk,
  :func:`reached`, for all of them);
- anything else: unchecked, the read checks it.

The optimizer reaches these through its :class:`~npu_loss_scale.detection.step.OverflowCheck`
(``observe`` and ``mark`` when the gradients are built, ``StepCheck.read_status`` at the read).
Marks live on the graph object (an attribute named per ``OverflowCheck``), as the rest of the
optimizer's per-graph state (:mod:`npu_loss_scale._internal.graphs`); eager execution keeps none.
"""
import tensorflow as tf

from npu_loss_scale._internal.compat.variables import key as variable_key

__all__ = ["mark", "split", "reached"]

# Graph-building helpers over Python lists: run as written when called from code AutoGraph
# converts (a tf.distribute replica function, a tf.function).
_as_is = tf.autograph.experimental.do_not_convert


def _values(grad):
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


@_as_is
def mark(attr, grads_and_vars, check):
    """Remembers, in the graph being built (under the graph attribute ``attr``), that these
    gradients were checked in scaled form (``check``: (tensor the read waits for or None, their
    overflow flag or None when the register covers them))."""
    if tf.executing_eagerly():
        return
    graph = tf.compat.v1.get_default_graph()
    marks = getattr(graph, attr, None)
    if marks is None:
        marks = {}
        setattr(graph, attr, marks)
    for grad, var in grads_and_vars:
        marks[variable_key(var)] = (check, _values(grad))


def _marks(attr):
    """The marks of the current graph and of every graph around it (inner ones win)."""
    marks = {}
    if not tf.executing_eagerly():
        chain, graph = [], tf.compat.v1.get_default_graph()
        while graph is not None:
            chain.append(graph)
            graph = getattr(graph, "outer_graph", None)
        for graph in reversed(chain):
            marks.update(getattr(graph, attr, {}))
    return marks


@_as_is
def split(attr, grads_and_vars):
    """(flags of observed gradients, tensors to wait for, gradients nothing checked yet).

    A gradient counts as checked when ``compute_gradients`` produced the gradient of its variable
    in the current graph (or a graph around it), or this gradient is computed from that one.
    """
    marks = _marks(attr)
    flags, waits, unchecked, seen = [], [], [], set()
    pending = []
    for g, v in grads_and_vars:
        if g is None:
            continue
        found = marks.get(variable_key(v))
        if found is None:
            unchecked.append(g)
        elif found[1] is _values(g):
            _use_check(found[0], flags, waits, seen)
        else:
            pending.append((g, found))
    if pending:
        # Gradients computed from the checked ones (clipped, scaled...) in this run are
        # covered; anything else (say an accumulator variable) is checked at the read.
        hit = reached([_values(g) for g, _ in pending], {id(found[1]) for _, found in pending})
        for g, found in pending:
            if id(found[1]) in hit:
                _use_check(found[0], flags, waits, seen)
            else:
                unchecked.append(g)
    return flags, waits, unchecked


def _use_check(check, flags, waits, seen):
    """Adds one check's flag and wait to the lists, once per check."""
    if id(check) in seen:
        return
    seen.add(id(check))
    wait, flag = check
    flags += [flag] if flag is not None else []
    waits += [wait] if wait is not None else []


@_as_is
def reached(tensors, targets):
    """Ids of the ``targets`` tensors that ``tensors`` are computed from (one graph walk)."""
    found, seen = set(), set()
    stack = [t for t in tensors if not isinstance(t, (tf.Variable,)) and hasattr(t, "op")]
    while stack and len(found) < len(targets):
        t = stack.pop()
        if id(t) in targets:
            found.add(id(t))
        op = t.op
        if id(op) in seen:
            continue
        seen.add(id(op))
        stack.extend(op.inputs)
    return found
