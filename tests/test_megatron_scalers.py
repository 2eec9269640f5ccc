"""Megatron grad scalers: rules against the Python twin, state_dict, checkpoints, optimizers."""
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings, strategies as st

import npu_loss_scale as nls
from npu_loss_scale.scaling.megatron import STUCK_MESSAGE
from npu_loss_scale.scaling.reference.megatron import DynamicScalerTwin
from tf_versions import evaluate, tf2_only
from warned import stuck

F32_MAX = float(np.finfo(np.float32).max)


def _graph_trace(scaler, overflow_seq):
    """Runs update(found_inf) over ``overflow_seq`` in a session; returns the state per step."""
    flag = tf.compat.v1.placeholder(tf.bool, [])
    update = scaler.update(flag)
    out = []
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for overflowed in overflow_seq:
            sess.run(update, {flag: overflowed})
            s, g, h, m = sess.run(scaler.variables)
            out.append(({"scale": float(s), "growth_tracker": int(g),
                         "hysteresis_tracker": int(h)}, int(m)))
    return out


@st.composite
def _scaler_params(draw):
    initial = draw(st.one_of(st.sampled_from([1.0, 2.0 ** 16, 2.0 ** 32, 1.0e38, 0.5]),
                             st.floats(min_value=1e-3, max_value=1e30)))
    params = {
        "initial_scale": initial,
        "min_scale": draw(st.sampled_from([initial, initial / 7.0, 1e-3, initial / 1024.0])),
        "growth_factor": draw(st.sampled_from([2.0, 1.5, 1.0001, 8.0, 3.3])),
        "backoff_factor": draw(st.sampled_from([0.5, 0.8, 0.1, 0.999, 1e-3])),
        "growth_interval": draw(st.integers(1, 5)),
        "hysteresis": draw(st.integers(1, 4)),
        "consecutive_hysteresis": draw(st.booleans()),
    }
    if draw(st.booleans()):
        params["max_scale"] = min(initial * draw(st.sampled_from([1.0, 3.0, 1e3])), F32_MAX)
    params["min_scale"] = max(params["min_scale"], 1e-30)
    return params


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=_scaler_params(), overflow_seq=st.lists(st.booleans(), min_size=1, max_size=40))
def test_dynamic_scaler_matches_the_twin_step_for_step_in_graph_mode(params, overflow_seq):
    with tf.Graph().as_default():
        got = _graph_trace(nls.DynamicGradScaler(**params), overflow_seq)
    twin = DynamicScalerTwin(**params)
    for step, (overflowed, (state, at_min)) in enumerate(zip(overflow_seq, got)):
        twin.step(overflowed)
        assert state == twin.as_dict(), "step %d" % step
        assert at_min == twin.overflows_at_min_in_a_row, "step %d" % step
        assert np.isfinite(state["scale"]) and state["scale"] > 0


@tf2_only
def test_dynamic_scaler_matches_the_twin_in_eager_mode():
    rng = np.random.RandomState(3)
    params = dict(initial_scale=2.0 ** 20, min_scale=2.0, growth_factor=2.0, backoff_factor=0.5,
                  growth_interval=3, hysteresis=3)
    scaler, twin = nls.DynamicGradScaler(**params), DynamicScalerTwin(**params)
    for _ in range(60):
        overflowed = bool(rng.rand() < 0.4)
        scaler.update(overflowed)
        twin.step(overflowed)
        assert scaler.state_dict() == twin.as_dict()


@tf2_only
def test_hysteresis_is_cumulative_and_only_growth_refills_it():
    # Worked out by hand from Megatron's code: hysteresis=2, growth_interval=3.
    scaler = nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, growth_interval=3, hysteresis=2)
    trace = []
    for overflowed in [True, False, False, True, True, False, False, False, True]:
        scaler.update(overflowed)
        sd = scaler.state_dict()
        trace.append((sd["scale"], sd["growth_tracker"], sd["hysteresis_tracker"]))
    assert trace == [
        (1024.0, 0, 1),     # one unit of hysteresis spent, no back-off yet
        (1024.0, 1, 1),     # a finite step does not refill it
        (1024.0, 2, 1),
        (512.0, 0, 0),      # second overflow (not in a row) backs off
        (256.0, 0, -1),     # spent: every further overflow backs off; the tracker goes below 0
        (256.0, 1, -1),
        (256.0, 2, -1),
        (512.0, 0, 2),      # growth refills hysteresis
        (512.0, 0, 1),
    ]


@tf2_only
def test_consecutive_hysteresis_option_counts_only_overflows_in_a_row():
    scaler = nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, growth_interval=100, hysteresis=2,
                                   consecutive_hysteresis=True)
    scales = []
    for overflowed in [True, False, True, False, True, True, True]:
        scaler.update(overflowed)
        scales.append(scaler.state_dict()["scale"])
    assert scales == [1024.0] * 5 + [512.0, 256.0]


@tf2_only
def test_backoff_stops_at_min_scale_and_growth_at_max_scale():
    scaler = nls.DynamicGradScaler(8.0, 3.0, 2.0, 0.5, growth_interval=1, hysteresis=1,
                                   max_scale=20.0)
    scales = []
    for overflowed in [True, True, False, False, False, False]:
        scaler.update(overflowed)
        scales.append(float(scaler.scale))
    assert scales == [4.0, 3.0, 6.0, 12.0, 20.0, 20.0]


@tf2_only
def test_growth_never_produces_an_inf_without_max_scale():
    scaler = nls.DynamicGradScaler(3.0e38, 1.0, 2.0, 0.5, growth_interval=1, hysteresis=1)
    scaler.update(False)
    assert float(scaler.scale) == F32_MAX


@tf2_only
def test_inv_scale_is_the_float32_of_the_float64_reciprocal():
    for value in (3.0, 2.0 ** 32, 1e-3, 7.7e37):
        scaler = nls.ConstantGradScaler(value)
        inv = scaler.inv_scale
        assert inv.dtype == tf.float32
        assert inv.numpy() == np.float32(1.0 / np.float64(np.float32(value)))
        assert scaler.scale.dtype == tf.float32


@tf2_only
def test_constant_scaler_never_changes_and_has_an_empty_state_dict():
    scaler = nls.ConstantGradScaler(512.0)
    for overflowed in (True, True, False, True):
        scaler.update(overflowed)
    assert float(scaler.scale) == 512.0
    assert scaler.state_dict() == {}
    scaler.load_state_dict({})
    assert float(scaler.get_loss_scale()) == 512.0


@tf2_only
# -- state_dict -------------------------------------------------------------------------------
def test_state_dict_round_trips_in_eager_mode_with_megatron_keys():
    a = nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, growth_interval=5, hysteresis=2)
    for overflowed in (True, True, True, False):
        a.update(overflowed)
    sd = a.state_dict()
    assert sd == {"scale": 256.0, "growth_tracker": 1, "hysteresis_tracker": -1}
    b = nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, growth_interval=5, hysteresis=2)
    b.load_state_dict(sd)
    assert b.state_dict() == sd
    for overflowed in (False, True, False, False, False, False):
        a.update(overflowed)
        b.update(overflowed)
        assert a.state_dict() == b.state_dict()


def test_state_dict_round_trips_in_graph_mode_through_a_session():
    sd_in = {"scale": 96.0, "growth_tracker": 3, "hysteresis_tracker": -4}
    with tf.Graph().as_default():
        scaler = nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, growth_interval=5, hysteresis=2)
        with pytest.raises(RuntimeError, match="session"):
            scaler.state_dict()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            scaler.load_state_dict(sd_in, session=sess)
            assert scaler.state_dict(session=sess) == sd_in
            with sess.as_default():
                assert scaler.state_dict() == sd_in
                scaler.load_state_dict(dict(sd_in, scale=48.0))
                assert sess.run("loss_scale:0") == 48.0
            n_ops = len(sess.graph.get_operations())
            scaler.load_state_dict(sd_in, session=sess)
            assert len(sess.graph.get_operations()) == n_ops    # assign ops built once


@tf2_only
def test_state_dict_accepts_a_one_element_tensor_scale_like_megatron():
    scaler = nls.DynamicGradScaler(8.0, 1.0, 2.0, 0.5, 2, 2)
    scaler.load_state_dict({"scale": np.array([4.0], np.float32), "growth_tracker": 1,
                            "hysteresis_tracker": 2})
    assert scaler.state_dict() == {"scale": 4.0, "growth_tracker": 1, "hysteresis_tracker": 2}


@tf2_only
@pytest.mark.parametrize("sd, exc, words", [
    ({"scale": 4.0, "growth_tracker": 0}, KeyError, ["hysteresis_tracker", "missing"]),
    ({"scale": 4.0, "growth_tracker": 0, "hysteresis_tracker": 1, "good_steps": 0}, KeyError,
     ["good_steps", "unknown"]),
    ({"scale": "x", "growth_tracker": 0, "hysteresis_tracker": 1}, TypeError, ["scale", "'x'"]),
    ({"scale": 4.0, "growth_tracker": 0.5, "hysteresis_tracker": 1}, ValueError,
     ["growth_tracker", "integer"]),
    ({"scale": float("inf"), "growth_tracker": 0, "hysteresis_tracker": 1}, ValueError,
     ["scale", "finite"]),
    ([1, 2], TypeError, ["dict"]),
])
def test_load_state_dict_rejects_bad_input(sd, exc, words):
    scaler = nls.DynamicGradScaler(8.0, 1.0, 2.0, 0.5, 2, 2)
    with pytest.raises(exc) as info:
        scaler.load_state_dict(sd)
    for w in words:
        assert w in str(info.value)


_GOOD_SD = {"scale": 4.0, "growth_tracker": 1, "hysteresis_tracker": -2}


@pytest.mark.parametrize("key, value, accepted", [
    ("scale", -1.0, ">= min_scale (1.0)"),
    ("scale", 0.0, ">= min_scale (1.0)"),
    ("scale", 0.5, ">= min_scale (1.0)"),      # the rule never goes below min_scale
    ("scale", 1e39, "float32 max"),            # would be stored as inf
    ("scale", 1e-50, ">= min_scale (1.0)"),    # would be stored as 0.0
    ("scale", float("nan"), "finite"),
    ("scale", 10 ** 39, "float32 max"),
    ("scale", 10 ** 400, "float32 max"),
    ("growth_tracker", 10 ** 12, "int32"),     # would wrap to -727379968
    ("growth_tracker", 10 ** 20, "int32"),     # beyond int64 too
    ("growth_tracker", -7, ">= 0"),
    ("growth_tracker", 2.5, "integer"),
    ("growth_tracker", float("nan"), "integer"),
    ("hysteresis_tracker", -2 ** 31 - 1, "int32"),
    ("hysteresis_tracker", 2 ** 31, "int32"),
    ("hysteresis_tracker", 1.5, "integer"),
])
@pytest.mark.parametrize("mode", [pytest.param("eager", marks=tf2_only), "graph"])
def test_load_state_dict_refuses_impossible_state_and_changes_nothing(key, value, accepted, mode):
    bad = dict(_GOOD_SD, **{key: value})
    if mode == "eager":
        scaler = nls.DynamicGradScaler(8.0, 1.0, 2.0, 0.5, 3, 2)
        scaler.load_state_dict(_GOOD_SD)
        with pytest.raises(ValueError) as info:
            scaler.load_state_dict(bad)
        assert scaler.state_dict() == _GOOD_SD
    else:
        with tf.Graph().as_default():
            scaler = nls.DynamicGradScaler(8.0, 1.0, 2.0, 0.5, 3, 2)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                scaler.load_state_dict(_GOOD_SD, session=sess)
                with pytest.raises(ValueError) as info:
                    scaler.load_state_dict(bad, session=sess)
                assert scaler.state_dict(session=sess) == _GOOD_SD
    message = str(info.value)
    assert "state_dict[%r]" % key in message
    assert repr(value) in message or repr(float(value)) in message
    assert accepted in message


@tf2_only
def test_load_state_dict_accepts_the_extremes_of_the_limits():
    scaler = nls.DynamicGradScaler(8.0, 1.0, 2.0, 0.5, 3, 2)
    extremes = {"scale": F32_MAX, "growth_tracker": 2 ** 31 - 1, "hysteresis_tracker": -2 ** 31}
    scaler.load_state_dict(extremes)
    assert scaler.state_dict() == extremes
    scaler.load_state_dict({"scale": 1.0, "growth_tracker": 0.0, "hysteresis_tracker": 3.0})
    assert scaler.state_dict() == {"scale": 1.0, "growth_tracker": 0,     # 1.0 = min_scale
                                   "hysteresis_tracker": 3}
    scaler.load_state_dict({"scale": 10 ** 30, "growth_tracker": np.int64(5),
                            "hysteresis_tracker": tf.constant(-4)})
    assert scaler.state_dict() == {"scale": float(np.float32(1e30)), "growth_tracker": 5,
                                   "hysteresis_tracker": -4}


@tf2_only
@pytest.mark.parametrize("key, value, accepted", [
    ("loss_scale", -5.0, ">= 1"),
    ("loss_scale", 0.5, ">= 1"),
    ("loss_scale", float("inf"), "finite"),
    ("loss_scale", 1e39, "float32 max"),
    ("good_steps", -3, ">= 0"),
    ("bad_steps", 2 ** 31, "int32"),
    ("good_steps", 1.5, "integer"),
])
def test_ascend_manager_load_state_dict_refuses_impossible_state(key, value, accepted):
    mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=1024, incr_every_n_steps=10,
                                                decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    good = {"loss_scale": 256.0, "good_steps": 4, "bad_steps": 1}
    mgr.load_state_dict(good)
    with pytest.raises(ValueError) as info:
        mgr.load_state_dict(dict(dict(good, loss_scale=512.0, good_steps=5), **{key: value}))
    assert mgr.state_dict() == good
    message = str(info.value)
    assert "state_dict[%r]" % key in message and repr(value) in message
    assert accepted in message


@tf2_only
def test_ascend_managers_gain_state_dict_in_eager_and_graph_mode():
    mgr = nls.ExponentialUpdateLossScaleManager(1024, incr_every_n_steps=5,
                                                decr_every_n_nan_or_inf=3)
    for finite in (False, True, False):
        mgr.update_loss_scale(finite)
    sd = mgr.state_dict()
    assert sd == {"loss_scale": 1024.0, "good_steps": 0, "bad_steps": 2}
    with tf.Graph().as_default():
        other = nls.ExponentialUpdateLossScaleManager(1024, incr_every_n_steps=5,
                                                      decr_every_n_nan_or_inf=3)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            other.load_state_dict(sd, session=sess)
            sess.run(other.update_loss_scale(False))
            assert other.state_dict(session=sess) == {"loss_scale": np.float32(1024 * 0.8),
                                                      "good_steps": 0, "bad_steps": 0}
    fixed = nls.FixedLossScaleManager(64)
    assert fixed.state_dict() == {}
    fixed.load_state_dict({})
    # a dynamic manager's state would be lost on a fixed one: refused, naming what was given
    with pytest.raises(ValueError, match=r"must be \{\}.*bad_steps"):
        fixed.load_state_dict(sd)


# -- checkpoints ------------------------------------------------------------------------------
def test_scaler_state_is_saved_and_restored_by_saver(tmp_path):
    path = str(tmp_path / "ckpt")
    make = lambda: nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, 4, 2)  # noqa: E731
    with tf.Graph().as_default():
        scaler = make()
        flag = tf.compat.v1.placeholder(tf.bool, [])
        update = scaler.update(flag)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for overflowed in (True, True, False, True):
                sess.run(update, {flag: overflowed})
            saved = scaler.state_dict(session=sess)
            saver.save(sess, path)
    assert saved == {"scale": 256.0, "growth_tracker": 0, "hysteresis_tracker": -1}
    with tf.Graph().as_default():
        scaler = make()
        with tf.compat.v1.Session() as sess:
            tf.compat.v1.train.Saver().restore(sess, path)
            assert scaler.state_dict(session=sess) == saved
            assert sess.run("loss_scale:0") == 256.0


@tf2_only
def test_scaler_state_round_trips_through_tf_train_checkpoint(tmp_path):
    a = nls.DynamicGradScaler(64.0, 1.0, 2.0, 0.5, 1, 3)
    a.update(True)
    a.update(False)
    prefix = tf.train.Checkpoint(scaler=a).save(str(tmp_path / "ckpt"))
    b = nls.DynamicGradScaler(64.0, 1.0, 2.0, 0.5, 1, 3)
    tf.train.Checkpoint(scaler=b).restore(prefix).assert_existing_objects_matched()
    assert b.state_dict() == a.state_dict() == {"scale": 128.0, "growth_tracker": 0,
                                                "hysteresis_tracker": 3}


# -- driving optimizers -----------------------------------------------------------------------
def _train_with(scaler_fn, poisons):
    """Trains w -> w - 0.1 * d(sum(w*w) * poison)/dw; returns [(w[0], global_step, scale)]."""
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=np.ones(3, np.float32))
        poison = tf.compat.v1.placeholder_with_default(1.0, [])
        loss = tf.reduce_sum(w * w) * poison
        scaler = scaler_fn()
        inner = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        opt = nls.NPULossScaleOptimizer(inner, scaler)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        out = []
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for p in poisons:
                sess.run(train, {poison: p})
                out.append(tuple(float(v) for v in sess.run([w[0], gs, scaler.get_loss_scale()])))
        return out


POISONS = [1.0, np.inf, 1.0, np.inf, np.inf, 1.0, 1.0, np.nan, 1.0]


def test_dynamic_scaler_drives_npu_loss_scale_optimizer_like_the_twin():
    params = dict(initial_scale=1024.0, min_scale=1.0, growth_factor=2.0, backoff_factor=0.5,
                  growth_interval=2, hysteresis=2)
    got = _train_with(lambda: nls.DynamicGradScaler(**params), POISONS)
    twin, w, step = DynamicScalerTwin(**params), np.float32(1.0), 0
    for p, (w_got, gs_got, scale_got) in zip(POISONS, got):
        overflowed = not np.isfinite(p)
        if not overflowed:
            w, step = np.float32(w - np.float32(0.1) * np.float32(2.0) * w), step + 1
        twin.step(overflowed)
        assert (w_got, gs_got, scale_got) == pytest.approx((w, step, twin.as_dict()["scale"]),
                                                           rel=1e-6)


def test_constant_scaler_drives_the_optimizer_and_overflowed_steps_are_skipped():
    got = _train_with(lambda: nls.ConstantGradScaler(256.0), POISONS)
    assert [g[1] for g in got] == [1, 1, 2, 2, 2, 3, 4, 4, 5]
    assert {g[2] for g in got} == {256.0}


class _HalvingScaler(nls.MegatronGradScaler):
    """A user's scaler with only Megatron's methods."""

    def update(self, found_inf):
        v = self.scale_variable
        return v.assign(tf.where(found_inf, v * 0.5, v))

    def state_dict(self):
        return {"scale": self.scale}

    def load_state_dict(self, state_dict):
        self.scale_variable.assign(state_dict["scale"])


def test_a_user_subclass_with_only_megatron_methods_drives_the_optimizer():
    got = _train_with(lambda: _HalvingScaler(64.0), POISONS)
    assert [g[2] for g in got] == [64.0, 32.0, 32.0, 16.0, 8.0, 8.0, 8.0, 4.0, 4.0]
    assert [g[1] for g in got] == [1, 1, 2, 2, 2, 3, 4, 4, 5]
    # TensorFlow's LossScale.update(grads) also reaches the user's update(found_inf)
    def update_once():
        scaler = _HalvingScaler(64.0)
        update, should_apply = scaler.update([tf.constant([np.inf])])
        with tf.control_dependencies([update, should_apply]):
            # a read made after the update (in a TF1 graph ``scaler.scale`` is the graph's one
            # loss_scale:0 tensor, which a Session may evaluate before the assignment)
            return should_apply, scaler.scale_variable.read_value()
    should_apply, scale = evaluate(update_once)
    assert not should_apply and scale == 32.0


@tf2_only
def test_update_takes_found_inf_flags_or_tensorflow_gradients():
    scaler = nls.DynamicGradScaler(16.0, 1.0, 2.0, 0.5, 10, 1)
    scaler.update(np.bool_(True))
    assert float(scaler.scale) == 8.0
    scaler.update(tf.constant([True]))
    assert float(scaler.scale) == 4.0
    _, should_apply = scaler.update([tf.constant([1.0, np.nan]), None])
    assert not bool(should_apply) and float(scaler.scale) == 2.0
    _, should_apply = scaler.update([tf.constant([1.0, 2.0])])
    assert bool(should_apply) and scaler.state_dict()["growth_tracker"] == 1


@tf2_only
@pytest.mark.parametrize("found_inf, overflowed", [
    (True, True), (False, False), (1, True), (0, False),
    (np.bool_(True), True), (np.int64(1), True), (np.int32(0), False), (np.float32(2.0), True),
    (np.array([1.0], np.float32), True), (np.array([[0]]), False),
    (tf.constant(1), True), (tf.constant(0, tf.int64), False),
    (tf.constant(1.0), True), (tf.constant([1.0]), True), (tf.constant([0.0]), False),
    (tf.constant([np.nan]), True), (tf.constant([[True]]), True), (tf.constant(False), False),
])
def test_update_reads_megatron_found_inf_in_every_form(found_inf, overflowed):
    # growth_interval=1: a finite step grows 1024 -> 2048, an overflow backs off to 512
    scaler = nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, 1, 1)
    assert scaler.update(found_inf) is None
    assert scaler.state_dict()["scale"] == (512.0 if overflowed else 2048.0)
    constant = nls.ConstantGradScaler(8.0)
    assert constant.update(found_inf) is None and float(constant.scale) == 8.0


def test_update_reads_megatron_found_inf_fed_in_graph_mode():
    with tf.Graph().as_default():
        scaler = nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, 1, 1)
        shaped = tf.compat.v1.placeholder(tf.float32, [1])     # Megatron's found_inf
        unknown = tf.compat.v1.placeholder(tf.float32, None)   # shape known only when it runs
        up_shaped, up_unknown = scaler.update(shaped), scaler.update(unknown)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(up_shaped, {shaped: [1.0]})
            assert scaler.state_dict(session=sess)["scale"] == 512.0
            sess.run(up_unknown, {unknown: [[0.0]]})
            assert scaler.state_dict(session=sess)["scale"] == 1024.0
            with pytest.raises(tf.errors.InvalidArgumentError, match="exactly one element"):
                sess.run(up_unknown, {unknown: [0.0, 1.0]})
            assert scaler.state_dict(session=sess)["scale"] == 1024.0


@tf2_only
@pytest.mark.parametrize("bad", [
    2, -1, 1.0, "x", None, object(),
    tf.constant([1.0, 0.0]), tf.constant([True, False]), np.array([1, 0]), np.array([]),
    tf.constant("yes"), np.array(["1"]),
])
def test_update_refuses_what_is_neither_found_inf_nor_gradients(bad):
    for scaler in (nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, 1, 1),
                   nls.ConstantGradScaler(8.0), _HalvingScaler(64.0)):
        before = float(scaler.scale)
        with pytest.raises(TypeError) as info:
            scaler.update(bad)
        message = str(info.value)
        assert "found_inf" in message and "exactly one element" in message
        assert "list, tuple or dict" in message and repr(bad) in message
        assert float(scaler.scale) == before


@tf2_only
def test_a_user_subclass_receives_found_inf_as_a_bool():
    seen = []

    class Recording(_HalvingScaler):
        def update(self, found_inf):
            seen.append(found_inf)
            return super().update(found_inf)

    scaler = Recording(64.0)
    scaler.update(1)
    scaler.update(np.int64(0))
    scaler.update(tf.constant([1.0]))
    assert seen[:2] == [True, False] and all(type(v) is bool for v in seen[:2])
    assert seen[2].dtype == tf.bool and seen[2].shape == () and bool(seen[2])
    assert float(scaler.scale) == 16.0
    _, should_apply = scaler.update({"w": tf.constant([1.0, 2.0]), "b": tf.constant([np.inf])})
    assert not bool(should_apply) and float(scaler.scale) == 8.0


@tf2_only
# -- stuck at the minimum ---------------------------------------------------------------------
def test_stuck_at_min_scale_warns_by_default_and_keeps_going(recwarn):
    scaler = nls.DynamicGradScaler(2.0, 2.0, 2.0, 0.5, 10, 1)
    for _ in range(5):
        scaler.update(True)
    assert scaler.variables[3].numpy() == 5
    assert stuck(recwarn) == ["npu_loss_scale: gradients overflowed at the minimum loss scale 2 "
                              "(%d such steps in a row); the step is skipped. Set "
                              "max_overflows_at_min_scale to stop instead." % n
                              for n in range(1, 6)]


def test_stuck_at_min_scale_raises_after_n_overflows_in_a_row_when_asked(recwarn):
    with tf.Graph().as_default():
        scaler = nls.DynamicGradScaler(4.0, 2.0, 2.0, 0.5, 10, 1, max_overflows_at_min_scale=3)
        flag = tf.compat.v1.placeholder(tf.bool, [])
        update = scaler.update(flag)
        stuck(recwarn)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            # 4 -> 2 (not yet at min when it overflowed), then 2 overflows at min, a finite
            # step resets the count, then 2 more at min: none of that is 3 in a row.
            for overflowed in (True, True, True, False, True, True):
                sess.run(update, {flag: overflowed})
            with pytest.raises(tf.errors.InvalidArgumentError, match=STUCK_MESSAGE):
                sess.run(update, {flag: True})
    assert len([m for m in stuck(recwarn) if "overflowed at the minimum loss scale" in m]) == 5


# -- argument checks --------------------------------------------------------------------------
GOOD = dict(initial_scale=1024.0, min_scale=1.0, growth_factor=2.0, backoff_factor=0.5,
            growth_interval=10, hysteresis=2)


@pytest.mark.parametrize("override, exc, words", [
    ({"growth_factor": 1.0}, ValueError, ["growth_factor", "1.0", "> 1"]),
    ({"growth_factor": "2"}, TypeError, ["growth_factor", "'2'", "real number"]),
    ({"backoff_factor": 1.0}, ValueError, ["backoff_factor", "1.0", "(0, 1)"]),
    ({"backoff_factor": 0.0}, ValueError, ["backoff_factor", "0.0", "(0, 1)"]),
    ({"growth_interval": 0}, ValueError, ["growth_interval", "0", ">= 1"]),
    ({"growth_interval": 1.5}, TypeError, ["growth_interval", "1.5", "integer"]),
    ({"hysteresis": 0}, ValueError, ["hysteresis", "0", ">= 1"]),
    ({"min_scale": 0.0}, ValueError, ["min_scale", "0.0", "> 0"]),
    ({"min_scale": 2048.0}, ValueError, ["min_scale", "2048.0", "initial_scale"]),
    ({"min_scale": None}, TypeError, ["min_scale", "None"]),
    ({"initial_scale": -1.0}, ValueError, ["initial_scale", "-1.0", "> 0"]),
    ({"initial_scale": float("nan")}, ValueError, ["initial_scale", "nan"]),
    ({"max_scale": 10.0}, ValueError, ["max_scale", "10.0", "initial_scale"]),
    ({"consecutive_hysteresis": 1}, TypeError, ["consecutive_hysteresis", "1"]),
    ({"max_overflows_at_min_scale": 0}, ValueError, ["max_overflows_at_min_scale", "0"]),
])
def test_dynamic_scaler_rejects_bad_arguments_naming_them(override, exc, words):
    with pytest.raises(exc) as info:
        nls.DynamicGradScaler(**dict(GOOD, **override))
    for w in words:
        assert w in str(info.value)


def test_constant_scaler_rejects_a_non_positive_scale():
    with pytest.raises(ValueError, match="initial_scale.*> 0"):
        nls.ConstantGradScaler(0.0)


def test_the_abstract_scaler_needs_megatrons_methods():
    class Incomplete(nls.MegatronGradScaler):
        def update(self, found_inf):
            return None

    with pytest.raises(TypeError, match="abstract"):
        Incomplete(1.0)
