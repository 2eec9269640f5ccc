"""The verdicts of the sites of TF2 steps (:mod:`npu_loss_scale.cli.doctor_hooks_tf2`), which
run outside a TF1 ``Session`` and so cannot be replayed.

Each ``tf.function`` step traced under the doctor leaves its graph, its loss and the gradients
it applies here. A site whose op is in such a graph and has no path of data edges to the loss or
an applied gradient in any of them is ``benign`` (method ``reachability``, as a TF1 site with no
path). A site with a path stays ``unknown`` (method ``reachability``), and so does one in no
remembered graph (an eager step, another function; method ``none``), with the reason. One run a
process: the graphs are kept for the run's end.
"""

from npu_loss_scale.tools.doctor.mode_findings import KERAS_FRONT_END

__all__ = ["remember", "ran", "verdict"]

_graphs = []        # (graph, names of the ops of the loss and the applied gradients)
_contexts = set()   # how the steps ran: "eagerly", "in a tf.function"

_FRONT_ENDS = {"GradScaler": "a GradScaler",
               KERAS_FRONT_END: "the Keras NpuLossScaleOptimizer, in model.fit or a custom loop"}


def ran(context):
    """Notes how a step ran: ``"eagerly"`` or ``"in a tf.function"``."""
    _contexts.add(context)


def remember(graph, loss, gradients):
    """Keeps ``graph`` (a traced step) with the ops of its ``loss`` (a tensor or None) and of
    the ``gradients`` it applies (tensors, IndexedSlices or None)."""
    if any(known is graph for known, _ in _graphs):
        return
    tensors = [loss] + [getattr(g, "values", g) for g in gradients]
    names = [t.op.name for t in tensors if getattr(t, "graph", None) is graph]
    if names:
        _graphs.append((graph, names))


def verdict(op_name, front_end):
    """``{"verdict", "method", "evidence", "op_type"}`` for the site ``op_name`` of a TF2 step
    of ``front_end`` (the report's name)."""
    from npu_loss_scale.tools.doctor.paths import DataGraph  # pylint: disable=import-outside-toplevel
    who = _FRONT_ENDS.get(front_end, front_end or "no known front end")
    if not _contexts:
        return {"verdict": "unknown", "method": "none", "op_type": None,
                "evidence": "the run ended before a Session judged %s (at the step limit or "
                            "when the session closes), and no TF2 step of the run holds it"
                            % op_name}
    found = [(graph, names) for graph, names in _graphs if _has_op(graph, op_name)]
    if not found:
        return {"verdict": "unknown", "method": "none", "op_type": None,
                "evidence": "the step ran %s with %s and %s is in no graph of a step the doctor "
                            "traced: no path to follow, and the doctor replays only in a TF1 "
                            "Session" % (" and ".join(sorted(_contexts)), who, op_name)}
    op_type = found[0][0].get_operation_by_name(op_name).type
    for graph, names in found:
        data = DataGraph(graph)
        if data.reaches(op_name, data.ancestors(names)):
            return {"verdict": "unknown", "method": "reachability", "op_type": op_type,
                    "evidence": "a path leads from %s to the loss or an applied gradient of "
                                "the step's tf.function, stepped by %s; the doctor replays a "
                                "step only in a TF1 Session" % (op_name, who)}
    return {"verdict": "benign", "method": "reachability", "op_type": op_type,
            "evidence": "no path from %s to the loss or any applied gradient of the step's "
                        "tf.function, stepped by %s" % (op_name, who)}


def _has_op(graph, op_name):
    try:
        graph.get_operation_by_name(op_name)
    except (KeyError, ValueError):
        return False
    return True
