"""Loss-scale managers: graph rules against the pure-Python reference, errors, state."""
import math

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings, strategies as st

import npu_loss_scale as nls
from tf_versions import tf2_only
from npu_loss_scale.scaling.reference.ascend import ExponentialUpdateRule, growth_threshold


def _run_sequence(mgr, finite_seq):
    """Runs update_loss_scale over ``finite_seq`` in a session; returns (scale, good, bad) per step."""
    flag = tf.compat.v1.placeholder(tf.bool, [])
    update = mgr.update_loss_scale(flag)
    scale_var, good_var, bad_var = mgr.variables
    out = []
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for finite in finite_seq:
            sess.run(update, {flag: finite})
            out.append(tuple(sess.run([scale_var, good_var, bad_var])))
    return out


managers = st.fixed_dictionaries({
    "init_loss_scale": st.one_of(st.sampled_from([1.0, 2.0 ** 15, 2.0 ** 32, 1.7e38, 3.0e38]),
                                 st.floats(min_value=1.0, max_value=1e30)),
    "incr_every_n_steps": st.integers(1, 6),
    "decr_every_n_nan_or_inf": st.integers(1, 4),
    "incr_ratio": st.sampled_from([2.0, 1.5, 3.0, 1.0001, 8.0]),
    "decr_ratio": st.sampled_from([0.5, 0.8, 0.1, 0.999, 1e-3]),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=managers, finite_seq=st.lists(st.booleans(), min_size=1, max_size=40))
def test_exponential_manager_matches_reference_rule_step_for_step(params, finite_seq):
    with tf.Graph().as_default():
        mgr = nls.ExponentialUpdateLossScaleManager(**params)
        got = _run_sequence(mgr, finite_seq)
    rule = ExponentialUpdateRule(**params)
    for step, (finite, (scale, good, bad)) in enumerate(zip(finite_seq, got)):
        rule.update(finite)
        assert (np.float32(scale), good, bad) == (rule.loss_scale, rule.good_steps,
                                                  rule.bad_steps), "step %d" % step
        assert math.isfinite(scale) and scale >= 1.0


def test_reference_rule_follows_the_documented_ascend_example():
    # Independent of the implementation: the numbers below are worked out by hand from the
    # rules in ascend-facts §3 with incr_every_n_steps=3, decr_every_n_nan_or_inf=2.
    rule = ExponentialUpdateRule(1024, 3, 2, incr_ratio=2, decr_ratio=0.5)
    trace = []
    for finite in [True, True, False, True, False, True, True, True, False, False]:
        rule.update(finite)
        trace.append((float(rule.loss_scale), rule.good_steps, rule.bad_steps))
    assert trace == [
        (1024.0, 1, 0), (1024.0, 2, 0),
        (1024.0, 0, 1),          # first bad step: not yet a decrease, good steps reset
        (1024.0, 1, 1),          # bad_steps is *not* reset by a good step
        (512.0, 0, 0),           # second bad step (not consecutive) decreases
        (512.0, 1, 0), (512.0, 2, 0),
        (1024.0, 0, 0),          # third consecutive good step grows
        (1024.0, 0, 1), (512.0, 0, 0),
    ]


def test_scale_never_grows_past_the_float32_ceiling(graph):
    mgr = nls.ExponentialUpdateLossScaleManager(3.0e38, incr_every_n_steps=1, incr_ratio=2)
    got = _run_sequence(mgr, [True] * 3)
    assert [g[0] for g in got] == [np.float32(3.0e38)] * 3
    assert [g[1] for g in got] == [0, 0, 0]   # counters still reset when growth is blocked


def test_scale_grows_while_below_the_ceiling(graph):
    start = float(growth_threshold(2.0)) * 0.99
    mgr = nls.ExponentialUpdateLossScaleManager(start, incr_every_n_steps=1, incr_ratio=2)
    got = _run_sequence(mgr, [True, True])
    assert got[0][0] == np.float32(start) * np.float32(2)
    assert got[1][0] == got[0][0]          # now above 3.4e38/2: stays
    assert np.isfinite(got[1][0])


def test_scale_floor_is_one(graph):
    mgr = nls.ExponentialUpdateLossScaleManager(4.0, incr_every_n_steps=10,
                                                decr_every_n_nan_or_inf=1, decr_ratio=0.5)
    got = _run_sequence(mgr, [False] * 5)
    assert [float(g[0]) for g in got] == [2.0, 1.0, 1.0, 1.0, 1.0]


def test_decrease_uses_float32_arithmetic(graph):
    mgr = nls.ExponentialUpdateLossScaleManager(2.0 ** 32, incr_every_n_steps=10,
                                                decr_every_n_nan_or_inf=1, decr_ratio=0.8)
    got = _run_sequence(mgr, [False] * 3)
    expected = np.float32(2.0 ** 32)
    for g in got:
        expected = np.float32(expected * np.float32(0.8))
        assert g[0] == expected
    assert float(got[-1][0]) != 2.0 ** 32 * 0.8 ** 3   # float64 arithmetic would differ


def test_fixed_manager_never_changes(graph):
    mgr = nls.FixedLossScaleManager(128)
    flag = tf.compat.v1.placeholder(tf.bool, [])
    update = mgr.update_loss_scale(flag)
    with tf.compat.v1.Session() as sess:
        for finite in (True, False, False):
            sess.run(update, {flag: finite})
            assert sess.run(mgr.get_loss_scale()) == 128.0
    assert mgr.get_enable_overflow_check() is True
    assert nls.FixedLossScaleManager(2, enable_overflow_check=False).get_enable_overflow_check() \
        is False


def test_loss_scale_tensor_by_name_is_the_float_value(graph, session):
    mgr = nls.ExponentialUpdateLossScaleManager(2 ** 16, 10)
    t = graph.get_tensor_by_name("loss_scale:0")
    assert t.dtype == tf.float32
    session.run(tf.compat.v1.global_variables_initializer())
    assert session.run("loss_scale:0") == 65536.0
    session.run(mgr.update_loss_scale(False))
    session.run(mgr.update_loss_scale(False))
    assert session.run("loss_scale:0") == np.float32(65536.0 * np.float32(0.8))


def test_fixed_manager_tensor_by_name(graph, session):
    nls.FixedLossScaleManager(512)
    assert session.run("loss_scale:0") == 512.0


def test_manager_can_be_built_under_control_dependencies(graph, session):
    x = tf.compat.v1.placeholder(tf.float32, [])
    with tf.control_dependencies([tf.identity(x)]):
        mgr = nls.ExponentialUpdateLossScaleManager(1024, 2)
    # The initializer must not need the placeholder (Ascend failed here).
    session.run(tf.compat.v1.global_variables_initializer())
    assert session.run(mgr.get_loss_scale()) == 1024.0


def test_manager_state_is_saved_and_restored_by_saver(tmp_path):
    path = str(tmp_path / "ckpt")
    with tf.Graph().as_default():
        mgr = nls.ExponentialUpdateLossScaleManager(1024, incr_every_n_steps=5,
                                                    decr_every_n_nan_or_inf=3)
        flag = tf.compat.v1.placeholder(tf.bool, [])
        update = mgr.update_loss_scale(flag)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for finite in (False, False, False, True, False):   # scale 819.2, good 0, bad 1
                sess.run(update, {flag: finite})
            saved = sess.run(mgr.variables)
            saver.save(sess, path)
    assert saved[1:] == [0, 1]
    with tf.Graph().as_default():
        mgr = nls.ExponentialUpdateLossScaleManager(1024, incr_every_n_steps=5,
                                                    decr_every_n_nan_or_inf=3)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            saver.restore(sess, path)
            assert sess.run(mgr.variables) == saved
            assert sess.run("loss_scale:0") == saved[0]


@tf2_only
def test_manager_state_round_trips_through_tf_train_checkpoint_in_eager(tmp_path):
    mgr = nls.ExponentialUpdateLossScaleManager(64, incr_every_n_steps=1)
    mgr.update_loss_scale(True)
    assert float(mgr.get_loss_scale()) == 128.0
    prefix = tf.train.Checkpoint(mgr=mgr).save(str(tmp_path / "ckpt"))
    restored = nls.ExponentialUpdateLossScaleManager(64, incr_every_n_steps=1)
    tf.train.Checkpoint(mgr=restored).restore(prefix).assert_existing_objects_matched()
    assert float(restored.get_loss_scale()) == 128.0


@pytest.mark.parametrize("kwargs, exc, words", [
    ({"loss_scale": 0.5}, ValueError, ["loss_scale", "0.5", ">= 1"]),
    ({"loss_scale": "big"}, TypeError, ["loss_scale", "'big'", "real number"]),
    ({"loss_scale": float("inf")}, ValueError, ["loss_scale", "inf"]),
    ({"loss_scale": True}, TypeError, ["loss_scale", "True"]),
    ({"loss_scale": 8, "enable_overflow_check": 1}, TypeError, ["enable_overflow_check", "1"]),
])
def test_fixed_manager_rejects_bad_input(graph, kwargs, exc, words):
    with pytest.raises(exc) as info:
        nls.FixedLossScaleManager(**kwargs)
    for w in words:
        assert w in str(info.value)


@pytest.mark.parametrize("override, exc, words", [
    ({"init_loss_scale": 0.0}, ValueError, ["init_loss_scale", "0.0", ">= 1"]),
    ({"init_loss_scale": 1e39}, ValueError, ["init_loss_scale", "1e+39"]),
    ({"init_loss_scale": None}, TypeError, ["init_loss_scale", "None"]),
    ({"incr_every_n_steps": 0}, ValueError, ["incr_every_n_steps", "0", ">= 1"]),
    ({"incr_every_n_steps": 2.5}, TypeError, ["incr_every_n_steps", "2.5", "integer"]),
    ({"decr_every_n_nan_or_inf": -1}, ValueError, ["decr_every_n_nan_or_inf", "-1"]),
    ({"incr_ratio": 1.0}, ValueError, ["incr_ratio", "1.0", "> 1"]),
    ({"incr_ratio": 0.5}, ValueError, ["incr_ratio", "0.5"]),
    ({"decr_ratio": 1.0}, ValueError, ["decr_ratio", "1.0", "(0, 1)"]),
    ({"decr_ratio": 0.0}, ValueError, ["decr_ratio", "0.0"]),
    ({"decr_ratio": "half"}, TypeError, ["decr_ratio", "'half'"]),
])
def test_exponential_manager_rejects_bad_input(graph, override, exc, words):
    kwargs = {"init_loss_scale": 2 ** 32, "incr_every_n_steps": 1000}
    kwargs.update(override)
    with pytest.raises(exc) as info:
        nls.ExponentialUpdateLossScaleManager(**kwargs)
    for w in words:
        assert w in str(info.value)


def test_update_rejects_a_non_boolean_flag(graph):
    mgr = nls.ExponentialUpdateLossScaleManager(8, 2)
    with pytest.raises(TypeError, match="finite_grads.*float32"):
        mgr.update_loss_scale(tf.constant(1.0))


def test_integral_floats_are_accepted_as_step_counts(graph):
    mgr = nls.ExponentialUpdateLossScaleManager(8, 1000.0, 2.0)
    assert mgr.get_config()["incr_every_n_steps"] == 1000
