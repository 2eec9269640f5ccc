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

from npu_loss_scale.tools.doctor.paths import DataGraph

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
    (tensors); None when the graph holds no op of that name. For many sites of one graph,
    :class:`~npu_loss_scale.tools.doctor.paths.DataGraph` answers without reading it again."""
    data = DataGraph(graph)
    return data.reaches(op_name, data.ancestors([op.name for op in _ops_of(targets)]))


def fed_by(graph, op_name, earlier, forward_op_of):
    """The sites among ``earlier`` whose values flow into the site ``op_name``
    (:meth:`~npu_loss_scale.tools.doctor.paths.DataGraph.fed_by`)."""
    data = DataGraph(graph)
    data.track([op_name] + list(earlier))   # one pass, not a walk per earlier site
    return data.fed_by(op_name, earlier, forward_op_of)


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


#: The emulation's fused float16 roundings (``NlsRoundHalfSaturate``, and ``NlsRoundHalf`` in
#: INF/NaN mode): a saturated output no longer shows an overflow, so a replay reads which
#: elements overflowed from the float32 value a rounding rounds.
FUSED_ROUNDING = frozenset(["NlsRoundHalfSaturate", "NlsRoundHalf"])


def _site_tensors(op):
    """The tensors a replay takes of the site ``op`` as run and feeds back neutralised: its
    floating outputs; of a fused rounding, its rounded value and then the value it rounds."""
    if op.type in FUSED_ROUNDING:
        return [op.outputs[0], op.inputs[0]]
    return [t for t in op.outputs if t.dtype.is_floating]


def _site_values(op, values, dtype_max):
    """``(overflowed?, {tensor: neutralised value})`` of the site ``op`` from ``values``, its
    :func:`_site_tensors` as run: a fused rounding's overflowed elements are those whose
    float16 rounding is inf or NaN, replaced by zero in its rounded value."""
    tensors = _site_tensors(op)
    if op.type not in FUSED_ROUNDING:
        return (_overflowed(values, dtype_max),
                {t: neutralised(v, dtype_max) for t, v in zip(tensors, values)})
    rounded, wide = (np.asarray(v) for v in values)
    with np.errstate(over="ignore", invalid="ignore"):
        lost = ~np.isfinite(wide.astype(np.float16))
    return bool(lost.any()), {tensors[0]: np.where(lost, np.zeros_like(rounded), rounded)}


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
    return replay_sites(run, [op], loss, gradients, feeds, [dtype_max], scale)[0]


def replay_sites(run, ops, loss, gradients, feeds, dtype_maxes, scale=None, others=(),
                 data=None):
    """The replay verdicts of the sites ``ops`` (``tf.Operation``s whose steps ran at the same
    scale), in their order, as :func:`replay` gives each: the step as run is fetched once for
    all of them (the loss, the applied gradients, the random and input-pipeline values and every
    site's outputs in one run), then each site whose values as run leave the loss and
    gradients finite is neutralised in a run of its own. When they are not finite, every site
    that overflows in that run is harmful without a second run: the same verdict the one-site
    replay gives from its first fetch.

    ``others``: more ops whose outputs that fetch takes too (the sites replayed at other
    scales), so that every such fetch of a graph asks for the same tensors: a ``Session``
    prepares the graph once per set of fetches and feeds, which on a large graph costs more
    than the run itself. With ``data`` (the graph's
    :class:`~npu_loss_scale.tools.doctor.paths.DataGraph`), the neutralised runs feed every
    fetched site too, at its value as run, so that they also share one prepared graph; except
    for a site that one of them follows (feeding that one would hide the neutralised value)."""
    targets = ([loss] if loss is not None else []) + list(gradients)
    floating = [_site_tensors(op) for op in ops]
    verdicts = [None] * len(ops)
    for i, op in enumerate(ops):
        if not floating[i] or not targets:
            verdicts[i] = ("unknown", "%s has no floating output to replace" % op.name)
    todo = [i for i, v in enumerate(verdicts) if v is None]
    if not todo:
        return verdicts
    sources = [t for src in ancestors_of_types(targets, REPLAY_SOURCE_TYPES)
               for t in src.outputs]
    feeds = dict(feeds or {})
    if scale is not None and scale[1] is not None:
        feeds[scale[0]] = scale[1]
    extra = [t for op in others if op not in ops for t in _site_tensors(op)]
    first = run({"targets": targets, "sites": [floating[i] for i in todo], "sources": sources,
                 "others": extra}, feeds)
    finite = _finite(first["targets"])
    what = "loss" if loss is not None and not _finite(first["targets"][:1]) else \
        "applied gradients"
    held = dict(zip(extra, first["others"]))
    for i, values in zip(todo, first["sites"]):
        held.update(zip(floating[i], values))
    held_ops = {t.op.name for t in held}
    for i, values in zip(todo, first["sites"]):
        op, dtype_max = ops[i], dtype_maxes[i]
        overflowed, replaced = _site_values(op, values, dtype_max)
        if not overflowed:
            verdicts[i] = ("unknown", "%s did not overflow when the step was replayed (the "
                           "variables have moved on since)" % op.name)
        elif not finite:
            verdicts[i] = ("harmful", "the step's %s as run hold inf or NaN: the overflow at %s "
                           "reaches the update" % (what, op.name))
        else:
            fed = dict(feeds)
            fed.update(zip(sources, first["sources"]))
            if data is not None and not (data.descendants(op.name) - {op.name}) & held_ops:
                fed.update(held)
            for t in floating[i]:
                fed.pop(t, None)   # a fused rounding's input stays as computed
            fed.update(replaced)
            difference = _max_difference(first["targets"], run(targets, fed))
            verdicts[i] = _compared(op.name, difference)
    return verdicts


def _compared(name, difference):
    if difference == 0.0:
        return "benign", ("with %s's overflowed elements replaced by 0 the loss and the applied "
                          "gradients are equal bit for bit to the step as run" % name)
    return "harmful", ("with %s's overflowed elements replaced by 0 the loss or an applied "
                       "gradient changes (largest difference %.3g)" % (name, difference))
