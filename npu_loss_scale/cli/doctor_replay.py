"""The verdicts of one doctor run's sites (:mod:`npu_loss_scale.cli.doctor_run`): for each site
seen, whether a path leads from it to the loss or an applied gradient, and where one does, a
replay of the step in the script's own ``Session`` with the site neutralised
(:mod:`npu_loss_scale.tools.doctor.verdicts`)."""
import re
import sys
import time

from npu_loss_scale.cli.doctor_record import number, site_key

__all__ = ["judge"]


def _op_type(graph, op_name):
    try:
        return graph.get_operation_by_name(op_name).type
    except (KeyError, ValueError):
        return None


def _entry(graph, data, op_name, direction, dtype, magnitude, earlier):
    from npu_loss_scale.tools.advisor import layer_of  # pylint: disable=import-outside-toplevel
    entry = {"op_name": op_name, "direction": direction, "dtype": dtype,
             "magnitude": number(magnitude), "fed_by": data.fed_by(op_name, earlier, layer_of),
             "op_type": _op_type(graph, op_name)}
    rounded = re.match(r"^(.*)_precision/[^/]+$", op_name)  # precision_mode's casts
    if rounded and _op_type(graph, rounded.group(1)):
        entry["rounded_op"] = {"op_name": rounded.group(1),
                               "op_type": _op_type(graph, rounded.group(1))}
    return entry


def _feeder_verdict(rec, judged, entry):
    """The verdict a site fed by earlier sites of its step takes: the first of them judged
    benign or harmful (in this batch or before), None when none is."""
    for name in entry["fed_by"]:
        for other in list(judged) + list(rec.verdicts.values()):
            if other["op_name"] == name and other.get("verdict") in ("benign", "harmful"):
                return other
    return None


def judge(rec, sess):
    """The verdicts of the sites seen so far, in this session's graph, replayed with the feeds
    of its last step. Made once the steps are done or when the session closes, so that no
    replay touches the emulated register between two steps of the run.

    A site that an earlier site of its step feeds takes that site's verdict (method
    ``fed_by``) instead of a replay of its own; the others with a path to the update are
    replayed together, one fetch of the step as run per loss scale
    (:func:`~npu_loss_scale.tools.doctor.verdicts.replay_sites`)."""
    from npu_loss_scale.tools.doctor.paths import DataGraph  # pylint: disable=import-outside-toplevel
    if not rec.pending or sess.graph not in rec.targets:
        return
    start, runs = time.monotonic(), [0]
    loss, grads, _ = rec.targets[sess.graph]
    pending, rec.pending = rec.pending, []
    data = DataGraph(sess.graph)
    data.track([site[0] for site in pending])   # fed_by of every site in one pass
    targets = ([loss] if loss is not None else []) + grads
    reaching = data.ancestors([t.op.name for t in targets])
    rec.in_replay = True
    try:
        entries, replays = [], []
        for op_name, direction, dtype, magnitude, earlier, step_scale in pending:
            entry = _entry(sess.graph, data, op_name, direction, dtype, magnitude, earlier)
            path = data.reaches(op_name, reaching)
            if path is None:
                entry.update(verdict="unknown", method="reachability",
                             evidence="no op named %s in the train op's graph" % op_name)
            elif not path:
                entry.update(verdict="benign", method="reachability",
                             evidence="no path from %s to the loss or any applied gradient"
                             % op_name)
            elif not entry["fed_by"]:
                replays.append((entry, step_scale))
            entries.append((entry, step_scale))
        _replay(rec, sess, replays, runs, data)
        for entry, step_scale in entries:  # in the order seen: a feeder before what it feeds
            if "verdict" not in entry:
                feeder = _feeder_verdict(rec, [e for e, _ in entries if "verdict" in e], entry)
                if feeder is None:
                    _replay(rec, sess, [(entry, step_scale)], runs, data)
                else:
                    entry.update(verdict=feeder["verdict"], method="fed_by", evidence=(
                        "%s is fed by %s, an earlier overflowed site of its step, and takes its "
                        "verdict (%s by %s) without a replay of its own"
                        % (entry["op_name"], feeder["op_name"], feeder["verdict"],
                           feeder["method"])))
            rec.verdicts[site_key(entry["op_name"], entry["direction"])] = entry
    finally:
        rec.in_replay = False
    rec.write()
    sys.stderr.write(_summary([e for e, _ in entries], time.monotonic() - start, runs[0]))


def _summary(entries, seconds, runs):
    """The line the run's log gets about the judging (scripts/bench_doctor.py reads it)."""
    count = {m: sum(1 for e in entries if e["method"] == m)
             for m in ("reachability", "fed_by", "reachability+replay")}
    return ("doctor: judged %d sites in %.1f s: %d by reachability alone, %d taking the verdict "
            "of a site feeding them, %d replayed in %d session runs\n" % (
                len(entries), seconds, count["reachability"], count["fed_by"],
                count["reachability+replay"], runs))


def _replay(rec, sess, replays, runs, data):
    """Replays the sites of ``replays`` (entry, the scale of its step): one batch per scale;
    ``runs[0]`` counts the session runs."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.tools.doctor import verdicts  # pylint: disable=import-outside-toplevel
    from tensorflow.python.client import session  # pylint: disable=import-outside-toplevel
    loss, grads, scale = rec.targets[sess.graph]
    feed_dict = rec.last_feeds.get(sess.graph)

    def run(fetches, feeds):
        runs[0] += 1
        return session.BaseSession.run(sess, fetches, feed_dict=feeds)

    by_scale = {}
    for entry, step_scale in replays:
        by_scale.setdefault(step_scale, []).append(entry)
    every = [sess.graph.get_operation_by_name(e["op_name"]) for e, _ in replays]
    for step_scale, batch in by_scale.items():
        ops = [sess.graph.get_operation_by_name(e["op_name"]) for e in batch]
        maxes = [float(np.finfo(e["dtype"]).max) if e["dtype"] in ("float16", "float32",
                                                                   "float64") else None
                 for e in batch]
        try:
            results = verdicts.replay_sites(run, ops, loss, grads, feed_dict, maxes,
                                            None if scale is None else (scale, step_scale),
                                            others=every, data=data)
        except Exception as err:  # pylint: disable=broad-except
            if len(batch) > 1:  # one site that cannot be fetched fails the batch: one by one
                for entry in batch:
                    _replay(rec, sess, [(entry, step_scale)], runs, data)
                continue
            results = [("unknown", "the replay failed: %s" % str(err)[:300])]
        for entry, (verdict, evidence) in zip(batch, results):
            entry.update(verdict=verdict, method="reachability+replay",
                         evidence="a path leads from %s to the update; %s"
                         % (entry["op_name"], evidence))
