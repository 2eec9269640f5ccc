"""The verdicts of one doctor run's sites (:mod:`npu_loss_scale.cli.doctor_run`): for each site
seen, whether a path leads from it to the loss or an applied gradient, and where one does, a
replay of the step in the script's own ``Session`` with the site neutralised
(:mod:`npu_loss_scale.tools.doctor.verdicts`)."""
import re

from npu_loss_scale.cli.doctor_record import number, site_key

__all__ = ["judge"]


def _op_type(graph, op_name):
    try:
        return graph.get_operation_by_name(op_name).type
    except (KeyError, ValueError):
        return None


def judge(rec, sess):
    """The verdicts of the sites seen so far, in this session's graph, replayed with the feeds
    of its last step. Made once the steps are done or when the session closes, so that no
    replay touches the emulated register between two steps of the run."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.tools.advisor import layer_of  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.tools.doctor import verdicts  # pylint: disable=import-outside-toplevel
    from tensorflow.python.client import session  # pylint: disable=import-outside-toplevel
    if not rec.pending or sess.graph not in rec.targets:
        return
    loss, grads, scale = rec.targets[sess.graph]
    feed_dict = rec.last_feeds.get(sess.graph)
    pending, rec.pending = rec.pending, []
    targets = ([loss] if loss is not None else []) + grads
    rec.in_replay = True
    try:
        for op_name, direction, dtype, magnitude, earlier, step_scale in pending:
            path = verdicts.reaches(sess.graph, op_name, targets)
            entry = {"op_name": op_name, "direction": direction, "dtype": dtype,
                     "magnitude": number(magnitude),
                     "fed_by": verdicts.fed_by(sess.graph, op_name, earlier, layer_of)}
            entry["op_type"] = _op_type(sess.graph, op_name)
            rounded = re.match(r"^(.*)_precision/[^/]+$", op_name)  # precision_mode's casts
            if rounded and _op_type(sess.graph, rounded.group(1)):
                entry["rounded_op"] = {"op_name": rounded.group(1),
                                       "op_type": _op_type(sess.graph, rounded.group(1))}
            if path is None:
                entry.update(verdict="unknown", method="reachability",
                             evidence="no op named %s in the train op's graph" % op_name)
            elif not path:
                entry.update(verdict="benign", method="reachability",
                             evidence="no path from %s to the loss or any applied gradient"
                             % op_name)
            else:
                op = sess.graph.get_operation_by_name(op_name)
                dmax = float(np.finfo(dtype).max) if dtype in ("float16", "float32",
                                                               "float64") else None
                try:
                    verdict, evidence = verdicts.replay(
                        lambda f, d: session.BaseSession.run(sess, f, feed_dict=d), op, loss,
                        grads, feed_dict, dmax,
                        None if scale is None else (scale, step_scale))
                except Exception as err:  # pylint: disable=broad-except
                    verdict, evidence = "unknown", "the replay failed: %s" % str(err)[:300]
                entry.update(verdict=verdict, method="reachability+replay",
                             evidence="a path leads from %s to the update; %s"
                             % (op_name, evidence))
            rec.verdicts[site_key(op_name, direction)] = entry
    finally:
        rec.in_replay = False
    rec.write()
