"""The doctor's verdict machinery on small TF1 graphs built here: which ops reach the loss and
gradients, which earlier sites feed a site, and the batched replay (one fetch of the step for all
sites, a second run only for a site whose step is finite), each answer worked out from the
graph by hand."""
import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale.tools.doctor import verdicts
from npu_loss_scale.tools.doctor.paths import DataGraph

LIMIT = 65504.0  # the float16 largest value: the sites below overflow it in float32


def _names(*tensors):
    return [t.op.name for t in tensors]


@pytest.fixture
def net(graph):
    """loss = sum(a * mask) + sum(c), a = x * w, b = a * 2, c = b + 1; metric = exp(x * 100),
    fetched by nothing the update depends on; grads = d loss / d w."""
    x = tf.constant([1.0, 100.0], name="x")
    w = tf.constant(1000.0, name="w")
    a = tf.multiply(x, w, name="a")
    b = tf.multiply(a, 2.0, name="b")
    c = tf.add(b, 1.0, name="c")
    metric = tf.exp(x * 100.0, name="metric")
    loss = tf.add(tf.reduce_sum(a * tf.constant([1.0, 0.0])), tf.reduce_sum(c), name="loss")
    grads = tf.gradients(loss, [w])
    return {"graph": graph, "a": a, "b": b, "c": c, "metric": metric, "loss": loss,
            "grads": grads}


def test_one_walk_back_from_the_targets_answers_every_sites_reachability(net):
    data = DataGraph(net["graph"])
    goal = data.ancestors(_names(net["loss"], *net["grads"]))
    assert data.reaches("a", goal) and data.reaches("c", goal)
    assert data.reaches("metric", goal) is False  # only the metric's own ops follow exp
    assert data.reaches("no_such_op", goal) is None
    # the one-site function gives the same answers
    targets = [net["loss"]] + net["grads"]
    assert [verdicts.reaches(net["graph"], n, targets) for n in ("a", "metric", "nope")] == \
        [True, False, None]


def test_fed_by_names_the_earlier_sites_whose_values_flow_into_a_site(net):
    data = DataGraph(net["graph"])
    def forward_of(name):  # a site named by no forward op: only data paths count
        return name
    # c = (a * 2) + 1: a and b feed it; the metric and c itself do not
    assert data.fed_by("c", ["metric", "a", "b", "c"], forward_of) == ["a", "b"]
    assert data.fed_by("a", ["b", "c"], forward_of) == []
    assert data.fed_by("no_such_op", ["a"], forward_of) == []

    # a gradient site whose forward op is c consumes what a computes: it feeds a's gradient;
    # one whose forward op is the metric does not
    def grad_forward(name):
        return {"grad_of_c": "c", "grad_of_metric": "metric"}.get(name, name)
    assert data.fed_by("a", ["grad_of_metric", "grad_of_c"], grad_forward) == ["grad_of_c"]
    assert verdicts.fed_by(net["graph"], "a", ["grad_of_metric", "grad_of_c"],
                           grad_forward) == ["grad_of_c"]


def test_tracked_sites_get_the_answers_of_the_walks_in_a_graph_with_a_loop():
    """DataGraph.track answers fed_by from bits set in one pass (again while a loop's back
    edge changes them); the walks answer each question on its own: every question about every
    pair of ops of a graph with a while loop gets the same answer from both."""
    v2 = tf.compat.v1.control_flow_v2_enabled()
    tf.compat.v1.disable_control_flow_v2()   # TF1 loops (Enter, Merge, NextIteration), as
    try:                                     # TF1 scripts build them
        with tf.Graph().as_default() as graph:
            x = tf.compat.v1.placeholder(tf.float32, [], name="x")
            a = tf.multiply(x, 2.0, name="a")
            _, looped = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * a + 1.0),
                                      [tf.constant(0), x], name="loop")
            tf.add(looped, 1.0, name="after")
            tf.exp(a, name="metric")
    finally:
        if v2:
            tf.compat.v1.enable_control_flow_v2()
    names = [op.name for op in graph.get_operations()]

    def forward_of(name):    # every op also stands for a gradient site of the op after it
        return names[(names.index(name) + 1) % len(names)]

    walked, tracked = DataGraph(graph), DataGraph(graph)
    tracked.track(names)
    assert any(op.type == "NextIteration" for op in graph.get_operations())
    for name in names:
        want = walked.fed_by(name, names, forward_of)
        assert tracked.fed_by(name, names, forward_of) == want, name
    assert "a" in walked.fed_by("after", names, lambda n: n)    # through the loop
    assert "after" not in walked.fed_by("a", names, lambda n: n)


class _Counted:
    def __init__(self, sess):
        self.sess, self.runs = sess, 0

    def __call__(self, fetches, feeds):
        self.runs += 1
        return self.sess.run(fetches, feed_dict=feeds)


def test_a_finite_step_fetched_once_then_one_run_per_overflowing_site(net, session):
    ops = [net["graph"].get_operation_by_name(n) for n in ("a", "c", "x")]
    run = _Counted(session)
    got = verdicts.replay_sites(run, ops, net["loss"], net["grads"], None, [LIMIT] * 3)
    # a = [1000, 100000]: its 100000 is masked out of the first sum but reaches c's sum
    # (2 * 100000 + 1), so zeroing it changes the loss by 2 * 100000; c = [2001, 200001] loses
    # 200001; x = [1, 100] does not overflow
    assert [v for v, _ in got] == ["harmful", "harmful", "unknown"]
    assert "largest difference 2e+05" in got[0][1] and "largest difference 2e+05" in got[1][1]
    assert "did not overflow" in got[2][1]
    assert run.runs == 1 + 2   # one fetch of the step, one neutralised run per overflowing site
    # the one-site replay agrees, site by site
    assert [verdicts.replay(_Counted(session), op, net["loss"], net["grads"],
                            None, LIMIT)[0] for op in ops] == ["harmful", "harmful", "unknown"]


def test_a_masked_site_is_benign_bit_for_bit(graph, session):
    x = tf.constant([1.0, 100.0])
    site = tf.multiply(x, 1000.0, name="site")          # [1000, 100000]
    w = tf.constant(1.0)
    loss = tf.reduce_sum(site * tf.constant([1.0, 0.0]) * w)   # the 100000 is multiplied by 0
    got = verdicts.replay_sites(_Counted(session), [site.op], loss, tf.gradients(loss, [w]),
                                None, [LIMIT])
    assert got[0][0] == "benign" and "equal bit for bit" in got[0][1]


def test_a_step_whose_values_are_not_finite_judges_every_site_in_one_run(graph, session):
    x = tf.constant([1.0, 800.0])
    w = tf.constant(1.0)
    big = tf.multiply(x, 1000.0, name="big")            # 800000 overflows the limit
    huge = tf.exp(x * w, name="huge")                   # exp(800) is inf in float32
    loss = tf.reduce_sum(big) + tf.reduce_sum(huge)
    run = _Counted(session)
    got = verdicts.replay_sites(run, [big.op, huge.op], loss, tf.gradients(loss, [w]), None,
                                [LIMIT, LIMIT])
    assert [v for v, _ in got] == ["harmful", "harmful"]
    assert all("the step's loss as run hold inf or NaN" in e for _, e in got)
    assert run.runs == 1


def test_a_site_without_floating_output_is_unknown_without_a_run(graph, session):
    count = tf.size(tf.constant([1.0, 2.0]), name="count")
    loss = tf.reduce_sum(tf.constant([1.0]))
    run = _Counted(session)
    got = verdicts.replay_sites(run, [count.op], loss, [], None, [LIMIT])
    assert got == [("unknown", "count has no floating output to replace")]
    assert run.runs == 0
    assert np.array_equal(verdicts.neutralised([1.0, np.inf, 7e4], LIMIT), [1.0, 0.0, 0.0])


def test_the_first_fetches_of_sites_at_two_scales_ask_for_the_same_tensors(net, session):
    """A Session prepares the graph once per set of fetches: the sites of each scale are fetched
    with those of the others."""
    seen = []

    def run(fetches, feeds):
        if isinstance(fetches, dict):
            seen.append(sorted(t.name for group in fetches.values() for t in _flat(group)))
        return session.run(fetches, feed_dict=feeds)
    a, c = (net["graph"].get_operation_by_name(n) for n in ("a", "c"))
    first = verdicts.replay_sites(run, [a], net["loss"], net["grads"], None, [LIMIT],
                                  others=[a, c])
    second = verdicts.replay_sites(run, [c], net["loss"], net["grads"], None, [LIMIT],
                                   others=[a, c])
    assert len(seen) == 2 and seen[0] == seen[1]
    assert "a:0" in seen[0] and "c:0" in seen[0]
    assert [first[0][0], second[0][0]] == ["harmful", "harmful"]


def _flat(group):
    for item in group:
        if isinstance(item, list):
            yield from _flat(item)
        else:
            yield item


def _feed_keys(session, log):
    def run(fetches, feeds):
        if not isinstance(fetches, dict):   # a neutralised run
            log.append(sorted(t.name for t in feeds))
        return session.run(fetches, feed_dict=feeds)
    return run


def test_independent_sites_are_neutralised_with_the_same_feeds(graph, session):
    x = tf.constant([1.0, 100.0])
    w = tf.constant(1.0)
    one = tf.multiply(x * w, 1000.0, name="one")      # [1000, 100000]
    two = tf.multiply(x * w, 2000.0, name="two")      # [2000, 200000]
    loss = tf.reduce_sum(one) + tf.reduce_sum(two)
    log = []
    got = verdicts.replay_sites(_feed_keys(session, log), [one.op, two.op], loss,
                                tf.gradients(loss, [w]), None, [LIMIT] * 2, data=DataGraph(graph))
    # zeroing one's 100000 takes 100000 off the loss, two's 200000 takes 200000
    assert [e.split("largest difference ")[1] for _, e in got] == ["1e+05)", "2e+05)"]
    assert len(log) == 2 and log[0] == log[1] == ["one:0", "two:0"]


def test_a_site_that_another_fetched_site_follows_is_neutralised_without_feeding_it(net, session):
    # c follows a: feeding c at its value as run would hide a's zeroed 100000 (masked out of
    # the first sum, it reaches the loss only through c) and make a look benign
    a, c = (net["graph"].get_operation_by_name(n) for n in ("a", "c"))
    log = []
    got = verdicts.replay_sites(_feed_keys(session, log), [a, c], net["loss"], net["grads"],
                                None, [LIMIT] * 2, data=DataGraph(net["graph"]))
    assert [v for v, _ in got] == ["harmful", "harmful"]
    assert "largest difference 2e+05" in got[0][1]
    assert log == [["a:0"], ["a:0", "c:0"]]
