"""NPULossScaleOptimizer: scaling, skip semantics, names, state, errors."""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from warned import stuck
from tf_versions import BASE_OPTIMIZER, control_flow, tf_mixed_precision

F32_MAX = float(np.finfo(np.float32).max)

OPTIMIZERS = {
    "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.05),
    "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.05, momentum=0.9),
    "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01),
}


def _model(seed=0):
    """A small linear-softmax model with a placeholder input and a `poison` multiplier."""
    rng = np.random.RandomState(seed)
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    poison = tf.compat.v1.placeholder_with_default(1.0, [], name="poison")
    w = tf.compat.v1.get_variable("w", initializer=rng.randn(4, 3).astype(np.float32))
    b = tf.compat.v1.get_variable("b", initializer=np.zeros(3, np.float32))
    logits = tf.matmul(x, w) + b
    labels = tf.constant([0, 1, 2, 1])
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits)) * poison
    return x, poison, loss, [w, b]


def _batches(n, seed=1):
    rng = np.random.RandomState(seed)
    return [rng.randn(4, 4).astype(np.float32) for _ in range(n)]


def _train(make_opt, wrap, feeds):
    """Runs one step per feed dict; returns (variable values after each step, global steps)."""
    with tf.Graph().as_default():
        x, poison, loss, variables = _model()
        opt = make_opt()
        if wrap is not None:
            opt = wrap(opt)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        values, steps = [], []
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for feed in feeds:
                sess.run(train, {x: feed[0], poison: feed[1]})
                values.append(sess.run(variables))
                steps.append(sess.run(gs))
        return values, steps, opt


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_finite_steps_are_bitwise_identical_to_the_plain_optimizer(kind):
    feeds = [(b, 1.0) for b in _batches(6)]
    plain, plain_steps, _ = _train(OPTIMIZERS[kind], None, feeds)
    scaled, scaled_steps, _ = _train(
        OPTIMIZERS[kind],
        lambda o: nls.NPULossScaleOptimizer(o, nls.ExponentialUpdateLossScaleManager(2 ** 12, 100)),
        feeds)
    assert scaled_steps == plain_steps == [1, 2, 3, 4, 5, 6]
    for p, s in zip(plain, scaled):
        for pv, sv in zip(p, s):
            np.testing.assert_array_equal(pv, sv)
    # and training really moved the variables
    assert not np.array_equal(plain[0][0], plain[-1][0])


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_overflowed_step_changes_no_variable_slot_or_global_step(kind):
    batches = _batches(4)
    with tf.Graph().as_default():
        x, poison, loss, variables = _model()
        mgr = nls.ExponentialUpdateLossScaleManager(2 ** 12, 100, decr_every_n_nan_or_inf=1,
                                                    decr_ratio=0.5)
        opt = nls.NPULossScaleOptimizer(OPTIMIZERS[kind](), mgr)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        all_vars = tf.compat.v1.global_variables()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train, {x: batches[0]})
            before = {v.name: sess.run(v) for v in all_vars}
            finite = sess.run([train, opt.overflow_status_reduce_all],
                              {x: batches[1], poison: 1e35})[1]
            after = {v.name: sess.run(v) for v in all_vars}
            assert not finite
            changed = sorted(n for n in before if not np.array_equal(before[n], after[n]))
            # Only the loss-scale state moves: the scale halves, the counters reset, one skip.
            assert changed == ["good_steps_value:0", "loss_scale_value:0"]
            assert after["loss_scale_value:0"] == 2 ** 11
            assert sess.run(opt.skipped_steps) == 1
            assert after["global_step:0"] == 1
            # the next finite step trains again
            sess.run(train, {x: batches[2]})
            assert sess.run(gs) == 2
            assert not np.array_equal(sess.run(variables[0]), before["w:0"])


def test_overflow_with_tfs_own_optimizer_and_fixed_scale_corrupts_but_ours_skips():
    feeds = [(_batches(1)[0], 1e35)]
    ours, ours_steps, _ = _train(OPTIMIZERS["sgd"], lambda o: nls.NPULossScaleOptimizer(
        o, nls.FixedLossScaleManager(2 ** 12)), feeds)
    theirs, theirs_steps, _ = _train(
        OPTIMIZERS["sgd"],
        lambda o: tf_mixed_precision.MixedPrecisionLossScaleOptimizer(o, 2 ** 12), feeds)
    assert ours_steps == [0] and np.all(np.isfinite(ours[0][0]))
    assert theirs_steps == [1] and not np.all(np.isfinite(theirs[0][0]))


def test_fixed_manager_without_overflow_check_applies_every_step_and_reads_no_status(graph):
    x, poison, loss, variables = _model()
    opt = nls.NPULossScaleOptimizer(OPTIMIZERS["sgd"](),
                                    nls.FixedLossScaleManager(8, enable_overflow_check=False))
    gs = tf.compat.v1.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=gs)
    op_types = {op.type for op in graph.get_operations() if "skipped_steps" not in op.name}
    assert "LookupTableFindV2" not in op_types          # no status register read
    assert not [op for op in graph.get_operations() if "overflow_status_reduce_all" in op.name]
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(train, {x: _batches(1)[0], poison: 3e38})
        assert sess.run(gs) == 1
        assert not np.all(np.isfinite(sess.run(variables[0])))
    with pytest.raises(RuntimeError, match="overflow_status_reduce_all"):
        opt.overflow_status_reduce_all  # pylint: disable=pointless-statement


def test_gradients_come_back_unscaled_for_dense_sparse_and_none(graph, session):
    table = tf.compat.v1.get_variable("table", initializer=np.arange(12, dtype=np.float32)
                                      .reshape(6, 2))
    dense = tf.compat.v1.get_variable("dense", initializer=np.ones(2, np.float32))
    unused = tf.compat.v1.get_variable("unused", initializer=np.ones(2, np.float32))
    rows = tf.nn.embedding_lookup(table, [1, 3, 3])
    loss = tf.reduce_sum(rows * dense * 3.0)
    plain = tf.compat.v1.train.GradientDescentOptimizer(1.0).compute_gradients(
        loss, [table, dense, unused])
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                    nls.FixedLossScaleManager(2 ** 20 * 1.5))
    ours = opt.compute_gradients(loss, [table, dense, unused])
    assert isinstance(ours[0][0], tf.IndexedSlices)
    assert ours[2][0] is None
    session.run(tf.compat.v1.global_variables_initializer())
    p_sparse, o_sparse = session.run([plain[0][0], ours[0][0]])
    np.testing.assert_allclose(o_sparse.values, p_sparse.values, rtol=1e-6)
    np.testing.assert_array_equal(o_sparse.indices, [1, 3, 3])
    np.testing.assert_allclose(*session.run([ours[1][0], plain[1][0]]), rtol=1e-6)
    # and applying with a None gradient in the list works
    train = opt.apply_gradients(ours)
    session.run(train)
    np.testing.assert_array_equal(session.run(unused), [1.0, 1.0])


def test_sparse_gradient_overflow_is_skipped(graph, session):
    table = tf.compat.v1.get_variable("table", initializer=np.ones((5, 2), np.float32))
    big = tf.compat.v1.placeholder_with_default(1.0, [])
    loss = tf.reduce_sum(tf.nn.embedding_lookup(table, [0, 4])) * big
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                    nls.FixedLossScaleManager(2 ** 10))
    train = opt.minimize(loss)
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(train, {big: 1e36})
    np.testing.assert_array_equal(session.run(table), np.ones((5, 2)))
    session.run(train)
    np.testing.assert_array_equal(session.run(table)[[0, 4]], np.zeros((2, 2)))


def test_float16_gradients_are_unscaled_in_float32(graph, session):
    # 2**-26 is below float16's smallest subnormal: a float16 reciprocal would be 0.
    coeffs = np.array([1e-4, 2e-4, 4e-4], np.float32)
    w = tf.compat.v1.get_variable("w16", initializer=np.full(3, 0.5, np.float16))
    loss = tf.reduce_sum(tf.cast(w, tf.float32) * coeffs)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                    nls.FixedLossScaleManager(2 ** 26))
    (g, _), = opt.compute_gradients(loss, [w])
    assert g.dtype == tf.float16
    session.run(tf.compat.v1.global_variables_initializer())
    got = session.run(g).astype(np.float32)
    np.testing.assert_allclose(got, coeffs, rtol=2e-3)   # float16 rounding of the scaled grad


def test_a_gradient_at_max_is_a_value_unless_saturate_recorded_an_overflow():
    """Saturation events are what saturate() records; a gradient that merely equals float32 MAX
    (no op overflowed) is a value on every backend. (Before: the emulation backend counted any
    scaled gradient at +-MAX, at the cost of a second pass over the gradients.)"""
    def run(backend, saturated):
        with tf.Graph().as_default():
            w = tf.compat.v1.get_variable("w", initializer=1.0)
            loss = w * F32_MAX      # the scaled gradient is exactly +MAX of float32
            if saturated:
                loss = nls.saturate(loss * 2.0)
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.0),
                                            nls.FixedLossScaleManager(1), backend=backend)
            train = opt.minimize(loss)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                return bool(sess.run([train, opt.overflow_status_reduce_all])[1])
    assert run("emulation", False) and run("inf_nan", False)
    assert not run("emulation", True)


def test_names_are_fetchable_and_properties_expose_them(graph, session):
    x, poison, loss, _ = _model()
    mgr = nls.ExponentialUpdateLossScaleManager(2 ** 10, 100, decr_every_n_nan_or_inf=1,
                                                decr_ratio=0.5)
    with tf.name_scope("train"):
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(), mgr)
        train = opt.minimize(loss)
    finite = graph.get_tensor_by_name("train/overflow_status_reduce_all:0")
    assert finite is opt.overflow_status_reduce_all and finite.dtype == tf.bool
    assert graph.get_tensor_by_name("loss_scale:0").dtype == tf.float32
    assert opt.skipped_steps.dtype == tf.int64
    assert graph.get_tensor_by_name("train/skipped_steps:0") is opt.skipped_steps
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(train, {x: _batches(1)[0], poison: 1e37})
    assert session.run(["loss_scale:0", opt.loss_scale, opt.skipped_steps]) == [512.0, 512.0, 1]


def test_name_and_attribute_fall_through(graph):
    inner = tf.compat.v1.train.AdamOptimizer(0.125)
    inner.custom_setting = "kept"
    opt = nls.NPULossScaleOptimizer(inner, nls.FixedLossScaleManager(4))
    assert opt.get_name() == "NPULossScale_Adam"
    assert nls.NPULossScaleOptimizer(inner, nls.FixedLossScaleManager(4), name="mine") \
        .get_name() == "mine"
    assert opt.custom_setting == "kept"
    with pytest.raises(AttributeError, match="private attributes are not forwarded"):
        opt._lr  # pylint: disable=protected-access,pointless-statement
    assert opt.inner_optimizer is inner
    assert isinstance(opt, BASE_OPTIMIZER)
    with pytest.raises(AttributeError):
        opt.no_such_attribute  # pylint: disable=pointless-statement
    v = tf.compat.v1.get_variable("v", initializer=1.0)
    opt.minimize(v * 2.0)
    assert opt.get_slot(v, "m") is inner.get_slot(v, "m") is not None
    assert inner.get_slot_names() == ["m", "v"]
    assert opt.get_slot_names() == []   # the slots are the inner optimizer's, saved once


def test_optimizer_state_save_and_restore(tmp_path):
    path = str(tmp_path / "model")
    batch = _batches(1)[0]

    def build():
        x, poison, loss, _ = _model()
        mgr = nls.ExponentialUpdateLossScaleManager(2 ** 10, 100, decr_every_n_nan_or_inf=3)
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(), mgr)
        gs = tf.compat.v1.train.get_or_create_global_step()
        return x, poison, opt, mgr, gs, opt.minimize(loss, global_step=gs)

    with tf.Graph().as_default():
        x, poison, opt, mgr, gs, train = build()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            # inf, not a large finite poison: a finite 1e35 step is applied, and what Adam then
            # makes of such gradients differs between TensorFlow releases (NaN weights on 2.6)
            for p in (np.inf, 1.0, np.inf, np.inf, 1.0):
                sess.run(train, {x: batch, poison: p})
            saved = sess.run([gs] + mgr.variables)
            assert sess.run(opt.skipped_steps) == 3    # a counter outside the checkpoint
            saver.save(sess, path)
    # by hand, with Ascend's counters (a finite step does not reset the overflow count): 2 steps
    # applied; the 3rd overflow (step 4) multiplies the scale by 0.8 and restarts the count;
    # step 5 is the one good step since
    assert saved == [2, np.float32(1024.0) * np.float32(0.8), 1, 0]
    with tf.Graph().as_default():
        x, poison, opt, mgr, gs, train = build()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            saver.restore(sess, path)
            assert sess.run([gs] + mgr.variables) == saved
            assert sess.run(opt.skipped_steps) == 0


def test_summaries_are_added_on_request(graph):
    x, poison, loss, _ = _model()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(),
                                    nls.FixedLossScaleManager(4), summaries=True)
    opt.minimize(loss)
    summaries = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)
    tags = sorted(tf.get_static_value(s.op.inputs[0]).item().decode() for s in summaries)
    assert tags == ["npu_loss_scale/loss_scale", "npu_loss_scale/overflow",
                    "npu_loss_scale/skipped_steps"]


def test_overflow_at_scale_one_is_reported(graph, session, recwarn):
    x, poison, loss, _ = _model()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                    nls.FixedLossScaleManager(1))
    train = opt.minimize(loss)
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(train, {x: _batches(1)[0]})
    assert stuck(recwarn) == []
    session.run(train, {x: _batches(1)[0], poison: float("inf")})
    assert stuck(recwarn) == ["npu_loss_scale: gradients overflowed at loss scale 1 - the scale "
                              "cannot go lower, the step is skipped. The model itself "
                              "overflows: check its fp16 ranges."]


@pytest.mark.parametrize("args, exc, words", [
    (("adam", None), TypeError, ["opt", "'adam'", "tf.compat.v1.train.Optimizer"]),
    ((None, "mgr"), TypeError, ["loss_scale_manager", "'mgr'"]),
])
def test_constructor_rejects_wrong_types(graph, args, exc, words):
    opt = args[0] if args[0] is not None else tf.compat.v1.train.AdamOptimizer()
    mgr = args[1] if args[1] is not None else nls.FixedLossScaleManager(2)
    with pytest.raises(exc) as info:
        nls.NPULossScaleOptimizer(opt, mgr)
    for w in words:
        assert w in str(info.value)


def test_constructor_rejects_a_keras_optimizer(graph):
    with pytest.raises(TypeError, match="opt must be a tf.compat.v1.train.Optimizer"):
        nls.NPULossScaleOptimizer(tf.keras.optimizers.SGD(), nls.FixedLossScaleManager(2))


def test_constructor_rejects_bad_flags(graph):
    mgr = nls.FixedLossScaleManager(2)
    sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    with pytest.raises(TypeError, match="is_distributed must be True or False; got 'yes'"):
        nls.NPULossScaleOptimizer(sgd, mgr, is_distributed="yes")
    with pytest.raises(ValueError, match="backend must be one of 'npu', 'emulation', 'inf_nan'; "
                                         "got 'gpu'"):
        nls.NPULossScaleOptimizer(sgd, mgr, backend="gpu")
    with pytest.raises(ValueError, match="agreement must be one of"):
        nls.NPULossScaleOptimizer(sgd, mgr, agreement="mpi")


def test_is_distributed_without_any_way_to_agree_fails_when_building(graph):
    x, poison, loss, _ = _model()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                    nls.FixedLossScaleManager(2), is_distributed=True)
    with pytest.raises(RuntimeError, match="is_distributed=True, but there is nothing to agree"):
        opt.minimize(loss)


def test_backend_choice_argument_then_environment_then_automatic(monkeypatch):
    monkeypatch.delenv(nls.BACKEND_ENV_VAR, raising=False)
    assert nls.get_backend_name() == "emulation"        # npu_bridge is not importable here
    monkeypatch.setenv(nls.BACKEND_ENV_VAR, "inf_nan")
    assert nls.get_backend_name() == "inf_nan"
    assert nls.get_backend_name("emulation") == "emulation"
    with tf.Graph().as_default():
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(),
                                        nls.FixedLossScaleManager(2))
    assert opt.backend_name == "inf_nan"
    monkeypatch.setenv(nls.BACKEND_ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="NPU_LOSS_SCALE_BACKEND.*'cuda'"):
        nls.get_backend_name()
    monkeypatch.setenv(nls.BACKEND_ENV_VAR, "npu")
    with pytest.raises(ImportError, match="npu_bridge"):
        with tf.Graph().as_default():
            nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(),
                                      nls.FixedLossScaleManager(2))


@pytest.mark.parametrize("v1_control_flow", [False, True])
def test_an_evaluation_overflow_sticks_until_the_evaluation_clears_it(v1_control_flow):
    """The register is sticky, as on the device: an eval run that saturates sets it, and the
    next train step skips, unless the evaluation fetches clear_overflow_status with it."""
    with control_flow(v2=not v1_control_flow):
        with tf.Graph().as_default():
            x = tf.compat.v1.placeholder(tf.float32, [None, 3])
            boost = tf.compat.v1.placeholder_with_default(1.0, [])
            w = tf.compat.v1.get_variable("w", initializer=tf.ones([3, 1]), use_resource=True)
            h = nls.saturate(tf.cast(tf.matmul(x, w) * boost, tf.float16))
            loss = tf.reduce_sum(tf.cast(h, tf.float32))
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01),
                                            nls.FixedLossScaleManager(64))
            train = opt.minimize(loss)
            clear = nls.clear_overflow_status(after=[h])
            feed = {x: np.ones([2, 3], np.float32)}
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                for _ in range(5):
                    assert sess.run([h, clear], {**feed, boost: 1e5})[0].max() == 65504.0
                    sess.run(train, feed)
                assert sess.run(opt.skipped_steps) == 0
                sess.run(h, {**feed, boost: 1e5})          # no clear: the device would skip
                sess.run(train, feed)
                assert sess.run(opt.skipped_steps) == 1
                sess.run(train, {**feed, boost: 1e5})          # its own overflow counts
                assert sess.run(opt.skipped_steps) == 2
                sess.run(train, feed)
                assert sess.run(opt.skipped_steps) == 2


@pytest.mark.parametrize("backend", ["emulation", "inf_nan"])
def test_gradients_not_from_compute_gradients_are_checked_at_the_read(graph, session, backend):
    """apply_gradients alone (gradients from tf.gradients) must still see an inf."""
    w = tf.compat.v1.get_variable("w", initializer=[1.0, 2.0])
    bad = tf.compat.v1.placeholder_with_default(1.0, [])
    loss = tf.reduce_sum(w * 3.0)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                    nls.FixedLossScaleManager(4), backend=backend)
    outside = opt.apply_gradients([(tf.gradients(loss, w)[0] * bad, w)])
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(outside, {bad: float("inf")})
    np.testing.assert_array_equal(session.run(w), [1.0, 2.0])
    session.run(outside)
    np.testing.assert_array_equal(session.run(w), [-0.5, 0.5])
    assert session.run(opt.skipped_steps) == 1


def _gradient_passes(fetch, grads, loss):
    """Reductions over gradient-sized tensors among the ancestors of ``fetch``, the model's
    own (those of the loss) left out."""
    from graph_walk import ancestors  # pylint: disable=import-outside-toplevel
    sizes = {g.shape.num_elements() for g in grads}
    model = ancestors([loss])
    return [op for op in ancestors([fetch])
            if op.type in ("Sum", "All", "Max", "Min", "NlsUnscaleAndCheck")
            and op.inputs[0].shape.num_elements() in sizes and op not in model]


@pytest.mark.parametrize("backend", ["emulation", "inf_nan"])
def test_one_pass_over_the_gradients_even_with_clipping_between_compute_and_apply(graph,
                                                                                   backend):
    ws = [tf.compat.v1.get_variable("w%d" % i, shape=[7 + i, 5]) for i in range(4)]
    loss = tf.add_n([tf.reduce_sum(w * w) for w in ws])
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                    nls.FixedLossScaleManager(4), backend=backend)
    grads_and_vars = opt.compute_gradients(loss)
    clipped, _ = tf.clip_by_global_norm([g for g, _ in grads_and_vars], 1.0)
    opt.apply_gradients(list(zip(clipped, ws)))
    passes = _gradient_passes(opt.overflow_status_reduce_all, [g for g, _ in grads_and_vars],
                              loss)
    assert len(passes) == len(ws)       # one pass per gradient (sum or fused), nothing else
