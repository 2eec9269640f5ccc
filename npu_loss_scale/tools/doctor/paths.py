"""Paths of data edges in a TF1 graph, for the verdicts of many sites at once
(:mod:`npu_loss_scale.tools.doctor.verdicts`).

The graph's data edges are read once into two plain maps (each op's consumers, each op's
inputs); every question after that is a walk over the maps. Which ops reach the loss or an
applied gradient is one walk back from them, shared by every site, instead of one walk forward
from each site.
"""

__all__ = ["DataGraph"]


def _walk(starts, step):
    """The names reached from ``starts`` by ``step`` (name -> next names), ``starts`` included."""
    seen, stack = set(starts), list(starts)
    while stack:
        for name in step(stack.pop()):
            if name not in seen:
                seen.add(name)
                stack.append(name)
    return seen


class DataGraph:
    """The data edges of ``graph`` (a ``tf.Graph``), read once."""

    def __init__(self, graph):
        self._inputs, self._consumers = {}, {}
        for op in graph.get_operations():   # in the order built: inputs first, but for loops
            self._inputs[op.name] = [t.op.name for t in op.inputs]
            self._consumers[op.name] = [c.name for out in op.outputs for c in out.consumers()]
        self._bit, self._fed = {}, {}       # see track()

    def track(self, op_names):
        """Prepares the answers of :meth:`fed_by` about the sites ``op_names`` in one pass over
        the graph, instead of a walk per question: each op gets a set of bits, one per tracked
        site with a path of data edges to it (the site's own bit included), taken from its
        inputs in the order the ops were built, again until nothing changes (a loop's back edge
        points at an op built before it)."""
        self._bit = {name: 1 << i for i, name in enumerate(dict.fromkeys(op_names))
                     if name in self}
        fed = dict.fromkeys(self._inputs, 0)
        changed = True
        while changed:
            changed = False
            for name, inputs in self._inputs.items():
                bits = self._bit.get(name, 0)
                for source in inputs:
                    bits |= fed[source]
                if bits != fed[name]:
                    fed[name], changed = bits, True
        self._fed = fed

    def _feeds(self, site, op_name):
        """Whether a path of data edges leads from ``site`` to ``op_name`` (both in the graph)."""
        bit = self._bit.get(site)
        if bit is not None:
            return bool(self._fed[op_name] & bit)
        return op_name in self.descendants(site)

    def __contains__(self, op_name):
        return op_name in self._inputs

    def ancestors(self, op_names):
        """The ops with a path of data edges to one of ``op_names``, those included."""
        return _walk([n for n in op_names if n in self], lambda n: self._inputs[n])

    def descendants(self, op_name):
        """The ops a path of data edges leads to from ``op_name``, it included."""
        return _walk([op_name] if op_name in self else [], lambda n: self._consumers[n])

    def reaches(self, op_name, goal):
        """True when a path of data edges leads from ``op_name`` to one of the op names in
        ``goal`` (a set, :meth:`ancestors` of the targets for many questions about the same
        targets: then a site reaches them when it is in that set); None when the graph holds no
        op of that name."""
        if op_name not in self:
            return None
        return op_name in goal

    def fed_by(self, op_name, earlier, forward_op_of):
        """The sites among ``earlier`` (op names that overflowed before ``op_name`` in the same
        step) whose values flow into the site ``op_name``: a path of data edges from one to the
        other, or, for the gradient flowing back into a forward op's output (a site named by its
        forward op), a gradient site whose forward op (``forward_op_of(name)``) consumes it."""
        if op_name not in self:
            return []
        out = []
        for name in earlier:
            if name == op_name:
                continue
            forward = forward_op_of(name)
            if (name in self and self._feeds(name, op_name)) or (
                    forward != name and forward in self and self._feeds(op_name, forward)):
                out.append(name)
        return out
