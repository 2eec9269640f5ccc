"""Benign or harmful: whether one overflow site of a TF1 graph can change the update.

Two methods, in this order:

* **reachability**: a path of data edges from the site's op to the loss or to any gradient the
  optimizer applies. No path: the site's value cannot change the update (a metric, a summary, an
  evaluation tensor), so it is *benign*; on the device it still sets the sticky float-status
  register and the step is skipped all the same.
* **replay** (where a path exists, in a ``Session``): the step's loss and applied gradients are
  fetched twice with the step's own feeds, as run and with the site's output fed with its
  overflowed elements replaced by zero (the random and input-pipeline values the step drew are
  fed with the values of the first fetch, so both see the same batch). *Harmful* when the values
  as run are not finite (the overflow reaches the update) or when neutralising the site changes
  any of them; *benign* when they are finite and equal, bit for bit (masked padding, a product
  with zero).
"""
import numpy as np

__all__ = ["ancestors_of_types", "fed_by", "reaches", "replay", "neutralised", "REPLAY_SOURCE_TYPES"]

#: Ops whose outputs differ from one run to the next although nothing was fed: a replay feeds
#: them the values of its first fetch.
REPLAY_SOURCE_TYPES = frozenset([
    "IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
    "QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2", "QueueDequeue",
    "QueueDequeueMany", "QueueDequeueUpTo", "RandomUniform", "RandomUniformInt",
    "RandomStandardNormal", "TruncatedNormal", "RandomShuffle", "Multinomial",
    "ParameterizedTruncatedNormal", "RandomGamma", "RandomPoisson", "RandomPoissonV2",
])


def _ops_of(tensors):
    return [t.op for t in tensors if t is not None]


def reaches(graph, op_name, targets):
    """True when a path of data edges leads from the op ``op_name`` to one of ``targets``
    (tensors); None when the graph holds no op of that name."""
    try:
        start = graph.get_operation_by_name(op_name)
    except (KeyError, ValueError):
        return None
    goal = {op.name for op in _ops_of(targets)}
    seen, stack = {start.name}, [start]
    while stack:
        op = stack.pop()
        if op.name in goal:
            return True
        for out in op.outputs:
            for consumer in out.consumers():
                if consumer.name not in seen:
                    seen.add(consumer.name)
                    stack.append(consumer)
    return False


def fed_by(graph, op_name, earlier, forward_op_of):
    """The sites among ``earlier`` (op names that overflowed before ``op_name`` in the same
    step) whose values flow into the site ``op_name``: a path of data edges from one to the
    other, or, for the gradient flowing back into a forward op's output (a site named by its
    forward op), a gradient site whose forward op (``forward_op_of(name)``) consumes it."""
    try:
        op = graph.get_operation_by_name(op_name)
    except (KeyError, ValueError):
        return []
    out = []
    for name in earlier:
        if name == op_name:
            continue
        if reaches(graph, name, op.outputs):
            out.append(name)
            continue
        forward = forward_op_of(name)
        if forward != name:
            try:
                consumer = graph.get_operation_by_name(forward)
            except (KeyError, ValueError):
                continue
            if reaches(graph, op_name, consumer.outputs):
                out.append(name)
    return out


def ancestors_of_types(targets, types):
    """The ops of ``types`` among the data ancestors of ``targets`` (tensors)."""
    found, seen, stack = [], set(), list(_ops_of(targets))
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type in types:
            found.append(op)
        stack.extend(t.op for t in op.inputs)
    return found


def neutralised(value, dtype_max):
    """``value`` with its non-finite elements, and those beyond ``dtype_max`` (the largest value
    of the dtype the site overflowed in), replaced by zero."""
    value = np.asarray(value)
    keep = np.isfinite(value)
    if dtype_max is not None:
        keep &= np.abs(np.where(keep, value, 0)) <= dtype_max
    return np.where(keep, value, np.zeros_like(value))


def _finite(values):
    return all(np.all(np.isfinite(np.asarray(v, dtype=np.float64))) for v in values)


def _max_difference(before, after):
    worst = 0.0
    for a, b in zip(before, after):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            return float("inf")
        with np.errstate(invalid="ignore"):
            diff = np.abs(a - b)
        diff = np.where(np.isnan(diff), np.inf, diff)
        worst = max(worst, float(np.max(diff)) if diff.size else 0.0)
    return worst


def _overflowed(values, dtype_max):
    return any(not np.array_equal(neutralised(v, dtype_max), np.asarray(v)) for v in values)


def replay(run, op, loss, gradients, feeds, dtype_max, scale=None):
    """The replay verdict of the site ``op`` (a ``tf.Operation``): ``(verdict, evidence)``.

    ``run(fetches, feed_dict)`` runs the session; ``loss`` (a tensor or None) and ``gradients``
    (the applied gradients' tensors) are what the update depends on; ``feeds`` the step's own
    feed dict; ``dtype_max`` the largest finite value of the site's dtype; ``scale`` a pair
    (the graph's loss-scale tensor, the scale of the step in which the site overflowed), fed so
    that the replay runs at that step's scale. ``unknown`` when the site does not overflow in
    the replay (the model moved on)."""
    targets = ([loss] if loss is not None else []) + list(gradients)
    floating = [t for t in op.outputs if t.dtype.is_floating]
    if not floating or not targets:
        return "unknown", "%s has no floating output to replace" % op.name
    sources = [t for src in ancestors_of_types(targets, REPLAY_SOURCE_TYPES)
               for t in src.outputs]
    feeds = dict(feeds or {})
    if scale is not None and scale[1] is not None:
        feeds[scale[0]] = scale[1]
    first = run({"targets": targets, "site": floating, "sources": sources}, feeds)
    if not _overflowed(first["site"], dtype_max):
        return "unknown", ("%s did not overflow when the step was replayed (the variables have "
                           "moved on since)" % op.name)
    if not _finite(first["targets"]):
        what = "loss" if loss is not None and not _finite(first["targets"][:1]) else \
            "applied gradients"
        return "harmful", ("the step's %s as run hold inf or NaN: the overflow at %s reaches "
                           "the update" % (what, op.name))
    fed = dict(feeds)
    fed.update(zip(sources, first["sources"]))
    fed.update({t: neutralised(v, dtype_max) for t, v in zip(floating, first["site"])})
    second = run(targets, fed)
    difference = _max_difference(first["targets"], second)
    if difference == 0.0:
        return "benign", ("with %s's overflowed elements replaced by 0 the loss and the applied "
                          "gradients are equal bit for bit to the step as run" % op.name)
    return "harmful", ("with %s's overflowed elements replaced by 0 the loss or an applied "
                       "gradient changes (largest difference %.3g)" % (op.name, difference))
