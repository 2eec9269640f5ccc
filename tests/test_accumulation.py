"""Built-in gradient accumulation: NPULossScaleOptimizer(..., accumulation_steps=N)."""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from tf_versions import tf2_only
from npu_loss_scale import agreement
from npu_loss_scale.tools import graph_checks

BIG = 1e6


def _model():
    w = tf.compat.v1.get_variable("w", initializer=np.array([1.0, 2.0], np.float32))
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    boost = tf.compat.v1.placeholder_with_default(1.0, [], name="boost")
    h = nls.saturate(tf.cast(w * x * boost, tf.float16))     # overflows for a big boost
    loss = tf.reduce_sum(tf.cast(h, tf.float32))              # d loss / d w = x (unsaturated)
    return w, x, boost, loss


def _manager():
    return nls.ExponentialUpdateLossScaleManager(2.0 ** 10, 1000, decr_every_n_nan_or_inf=1,
                                                 decr_ratio=0.5)


@pytest.mark.slow
def test_the_mean_of_n_micro_batches_is_applied_once_and_global_step_moves_once(graph, session):
    w, x, _, loss = _model()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0), _manager(),
                                    accumulation_steps=3)
    gs = tf.compat.v1.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=gs)
    session.run(tf.compat.v1.global_variables_initializer())
    xs = [np.array([1.0, 2.0], np.float32), np.array([4.0, -1.0], np.float32),
          np.array([0.5, 0.25], np.float32)]
    for i, value in enumerate(xs):
        session.run(train, {x: value})
        if i < 2:
            assert session.run(gs) == 0
            np.testing.assert_array_equal(session.run(w), [1.0, 2.0])
    assert session.run(gs) == 1
    np.testing.assert_allclose(session.run(w), np.array([1.0, 2.0]) - np.mean(xs, axis=0),
                               rtol=1e-6)
    accumulators = [v for v in tf.compat.v1.global_variables() if "accumulator" in v.name]
    assert [v.dtype.base_dtype for v in accumulators] == [tf.float32]
    assert [session.run(v).tolist() for v in accumulators] == [[0.0, 0.0]]   # restarted


def test_an_overflow_in_one_micro_batch_skips_the_whole_step_although_the_sum_looks_finite(
        graph, session):
    w, x, boost, loss = _model()
    mgr = _manager()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0), mgr,
                                    accumulation_steps=3)
    gs = tf.compat.v1.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=gs)
    session.run(tf.compat.v1.global_variables_initializer())
    ones = np.ones(2, np.float32)
    session.run(train, {x: ones, boost: BIG})     # saturated: every value stays finite
    session.run(train, {x: ones})
    _, finite = session.run([train, opt.overflow_status_reduce_all], {x: ones})
    assert not finite
    # one decision: skipped once, scale halved once, nothing applied, accumulators restart
    assert session.run([gs, opt.skipped_steps, mgr.get_loss_scale()]) == [0, 1, 512.0]
    np.testing.assert_array_equal(session.run(w), [1.0, 2.0])
    for _ in range(3):
        session.run(train, {x: 2 * ones})
    assert session.run([gs, opt.skipped_steps]) == [1, 1]
    np.testing.assert_allclose(session.run(w), [-1.0, 0.0])   # only the clean window's mean


def test_accumulation_agrees_across_ranks_with_one_collective_per_applied_step(graph):
    agreement.configure_collective({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "worker", 0,
                                   timeout=5)
    try:
        _, _, _, loss = _model()
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                        _manager(), is_distributed=True, accumulation_steps=4)
        train = opt.minimize(loss)
        assert graph_checks.count_collectives(train) == 1
        reduces = [op for op in graph.get_operations() if op.type == "CollectiveReduceV2"]
        assert reduces == []   # it lives in the decision branch, run once per N micro-batches
    finally:
        agreement.configure_collective(None)


def test_sparse_gradients_accumulate_into_a_dense_float32_accumulator(graph, session):
    table = tf.compat.v1.get_variable("table", initializer=np.zeros((4, 2), np.float16))
    rows = tf.compat.v1.placeholder(tf.int32, [2])
    loss = tf.reduce_sum(tf.cast(tf.nn.embedding_lookup(table, rows), tf.float32))
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                    nls.FixedLossScaleManager(4), accumulation_steps=2)
    train = opt.minimize(loss)
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(train, {rows: [0, 1]})
    session.run(train, {rows: [1, 3]})
    np.testing.assert_array_equal(session.run(table),
                                  [[-0.5, -0.5], [-1.0, -1.0], [0.0, 0.0], [-0.5, -0.5]])


@tf2_only
def test_accumulation_in_a_tf_function():
    w = tf.Variable([1.0, 2.0])
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                    nls.FixedLossScaleManager(8), accumulation_steps=2)

    @tf.function
    def step(x, boost):
        opt.minimize(lambda: tf.reduce_sum(tf.cast(nls.saturate(
            tf.cast(w * x * boost, tf.float16)), tf.float32)), var_list=[w])

    one = tf.ones([2])
    step(one, tf.constant(BIG))
    step(one, tf.constant(1.0))
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
    assert int(opt.skipped_steps.numpy()) == 1
    step(one, tf.constant(1.0))
    step(3 * one, tf.constant(1.0))
    np.testing.assert_array_equal(w.numpy(), [-1.0, 0.0])


def test_accumulation_steps_is_checked_and_refused_inside_a_strategy(graph):
    sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    with pytest.raises(ValueError, match="accumulation_steps must be"):
        nls.NPULossScaleOptimizer(sgd, nls.FixedLossScaleManager(2), accumulation_steps=0)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        w = tf.compat.v1.get_variable("w", initializer=1.0)
        opt = nls.NPULossScaleOptimizer(sgd, nls.FixedLossScaleManager(2), accumulation_steps=2)
        with pytest.raises(NotImplementedError, match="accumulation_steps=2 inside a "
                                                      "tf.distribute strategy"):
            strategy.extended.call_for_each_replica(lambda: opt.minimize(w * 2.0))
