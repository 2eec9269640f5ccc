"""OptimizerParamScheduler, its overrides and ParamGroupOptimizer (npu_loss_scale.schedules).

The values are compared with ``param_scheduler_reference`` (plain Python written from the seed
and Megatron's formulas, no shared code) over random configurations and steps, on the Python
path and on the graph path.
"""
import math

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings, strategies as st

import npu_loss_scale as nls
from npu_loss_scale.schedules import (LR_DECAY_STYLES, WD_INCR_STYLES, WSD_DECAY_STYLES,
                                      OptimizerParamScheduler, ParamGroupOptimizer)
from param_scheduler_reference import Reference
from tf_versions import tf2_only

STYLE_CASES = [(s, None) for s in LR_DECAY_STYLES if s != "WSD"] + \
    [("WSD", w) for w in WSD_DECAY_STYLES]
SETTINGS = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def configs(draw, style, wsd_style, wd_style):
    rate = st.floats(0.0, 2.0, allow_nan=False)
    a, b, c = sorted(draw(st.tuples(rate, rate, rate)))
    init_lr = draw(st.sampled_from([0.0, a]))
    min_lr, max_lr = (a, c) if init_lr == 0.0 else (b, c)
    decay = draw(st.integers(1, 300))
    warmup = draw(st.integers(0, decay - 1))
    wsd = draw(st.integers(0, decay)) if style == "WSD" else None
    w1, w2 = sorted(draw(st.tuples(st.floats(0.0, 0.5), st.floats(0.0, 0.5))))
    if wd_style == "constant":
        w1 = w2
    wd_steps = draw(st.integers(1 if wd_style != "constant" else 0, 300))
    group = draw(st.fixed_dictionaries({}, optional={
        "max_lr": st.floats(1.0, 3.0), "min_lr": st.floats(0.0, 0.5),
        "wd_mult": st.floats(0.0, 2.0)}))
    if draw(st.booleans()):
        group.update(start_wd=0.1, end_wd=0.1 if wd_style == "constant" else 0.3)
    kwargs = dict(init_lr=init_lr, max_lr=max_lr, min_lr=min_lr, lr_warmup_steps=warmup,
                  lr_decay_steps=decay, lr_decay_style=style, start_wd=w1, end_wd=w2,
                  wd_incr_steps=wd_steps, wd_incr_style=wd_style, wsd_decay_steps=wsd,
                  lr_wsd_decay_style=wsd_style)
    steps = sorted(set(draw(st.lists(st.integers(0, 2 * decay + 5), min_size=1, max_size=30))
                       + [0, warmup, decay, decay + 1, decay - (wsd or 0)]))
    return kwargs, group, steps


def _reference(kwargs):
    return Reference(kwargs["init_lr"], kwargs["max_lr"], kwargs["min_lr"],
                     kwargs["lr_warmup_steps"], kwargs["lr_decay_steps"],
                     kwargs["lr_decay_style"], kwargs["start_wd"], kwargs["end_wd"],
                     kwargs["wd_incr_steps"], kwargs["wd_incr_style"],
                     kwargs["wsd_decay_steps"], kwargs["lr_wsd_decay_style"])


# -- the Python path against the reference -------------------------------------------------------
@pytest.mark.parametrize("style, wsd_style", STYLE_CASES)
@pytest.mark.parametrize("wd_style", WD_INCR_STYLES)
def test_python_values_match_the_reference_for_random_configs(style, wsd_style, wd_style):
    @SETTINGS
    @given(configs(style, wsd_style, wd_style))
    def check(case):
        kwargs, group, steps = case
        scheduler = OptimizerParamScheduler(None, **kwargs)
        reference = _reference(kwargs)
        for n in steps:
            scheduler.num_steps = n
            for g in ({}, group):
                assert scheduler.get_lr(g) == pytest.approx(reference.lr(n, g), rel=1e-12,
                                                            abs=1e-15), (n, g)
                assert scheduler.get_wd(g) == pytest.approx(reference.wd(n, g), rel=1e-12,
                                                            abs=1e-15), (n, g)
    check()  # pylint: disable=no-value-for-parameter


# -- the graph path against the reference --------------------------------------------------------
@pytest.mark.parametrize("style, wsd_style", STYLE_CASES)
def test_graph_values_match_the_reference_for_random_configs(style, wsd_style):
    @settings(SETTINGS, max_examples=6)
    @given(configs(style, wsd_style, "linear"))
    def check(case):
        kwargs, group, steps = case
        reference = _reference(kwargs)
        with tf.Graph().as_default():
            scheduler = OptimizerParamScheduler(None, **kwargs)
            n = tf.compat.v1.placeholder(tf.int64, [None])
            tensors = [scheduler.lr_tensor(g, n) for g in ({}, group)] + \
                [scheduler.wd_tensor(g, n) for g in ({}, group)]
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                got = session.run(tensors, {n: steps})
        want = [[reference.lr(s, g) for s in steps] for g in ({}, group)] + \
            [[reference.wd(s, g) for s in steps] for g in ({}, group)]
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-9, atol=1e-12)
    check()  # pylint: disable=no-value-for-parameter


# -- Megatron's rules where the seed is vague ----------------------------------------------------
def _scheduler(optimizer=None, **changes):
    kwargs = dict(init_lr=0.0, max_lr=1.0, min_lr=0.1, lr_warmup_steps=10, lr_decay_steps=110,
                  lr_decay_style="linear", start_wd=0.0, end_wd=0.1, wd_incr_steps=100,
                  wd_incr_style="linear")
    kwargs.update(changes)
    return OptimizerParamScheduler(optimizer, **kwargs)


def test_constant_never_decays_to_min_lr_and_every_other_style_does():
    for style in LR_DECAY_STYLES:
        extra = dict(wsd_decay_steps=20, lr_wsd_decay_style="cosine") if style == "WSD" else {}
        s = _scheduler(lr_decay_style=style, **extra)
        s.step(111)
        assert s.get_lr({}) == (1.0 if style == "constant" else 0.1), style
        s.step(10 ** 6)
        assert s.get_lr({}) == (1.0 if style == "constant" else 0.1), style


def test_inverse_square_root_reaches_min_lr_past_lr_decay_steps():
    s = _scheduler(lr_decay_style="inverse-square-root", min_lr=0.01, lr_warmup_steps=4,
                   lr_decay_steps=16)
    s.step(16)
    assert s.get_lr({}) == pytest.approx(0.5)           # sqrt(4 / 16), above the floor
    s.step(1)
    assert s.get_lr({}) == 0.01


def test_wsd_is_stable_then_anneals_over_the_last_wsd_decay_steps():
    s = _scheduler(lr_decay_style="WSD", lr_warmup_steps=10, lr_decay_steps=110, min_lr=0.0,
                   wsd_decay_steps=20, lr_wsd_decay_style="linear")
    values = {}
    for n in (10, 50, 90, 95, 100, 110, 111):
        s.num_steps = n
        values[n] = s.get_lr({})
    assert values[10] == values[50] == values[90] == 1.0          # stable until 110 - 20
    assert values[95] == pytest.approx(0.75) and values[100] == pytest.approx(0.5)
    assert values[110] == pytest.approx(0.0) and values[111] == 0.0
    exp = _scheduler(lr_decay_style="WSD", min_lr=0.0, wsd_decay_steps=20,
                     lr_wsd_decay_style="exponential")
    exp.step(100)
    assert exp.get_lr({}) == pytest.approx(2 * 0.5 ** 0.5 - 1)
    root = _scheduler(lr_decay_style="WSD", min_lr=0.0, wsd_decay_steps=20,
                      lr_wsd_decay_style="minus_sqrt")
    root.step(95)
    assert root.get_lr({}) == pytest.approx(0.5)


def test_wd_mult_is_applied_when_step_sets_the_group_not_in_get_wd():
    class Holder:
        param_groups = [{"wd_mult": 0.5}, {"wd_mult": 0.0, "max_lr": 2.0}, {}]

    s = _scheduler(Holder())
    s.step(50)
    assert s.get_wd({"wd_mult": 0.5}) == pytest.approx(0.05)       # no multiplier here
    assert [g["weight_decay"] for g in Holder.param_groups] == pytest.approx([0.025, 0.0, 0.05])
    assert [g["lr"] for g in Holder.param_groups] == pytest.approx([0.64, 1.24, 0.64])


def test_plain_dicts_are_param_groups_and_the_constructor_sets_step_zero():
    class Holder:
        param_groups = [{"max_lr": 3.0}]

    s = _scheduler(Holder(), init_lr=0.5)
    assert s.num_steps == 0 and Holder.param_groups[0]["lr"] == 0.5
    s.step(5)
    assert Holder.param_groups[0]["lr"] == pytest.approx(0.5 + 2.5 * 0.5)
    assert s.get_lr({"max_lr": 3.0, "min_lr": 1.0, "anything": "else"}) == pytest.approx(1.75)
    assert s.get_wd() == pytest.approx(0.005)


# -- argument checks -----------------------------------------------------------------------------
@pytest.mark.parametrize("changes, error, message", [
    (dict(lr_decay_style="step"), ValueError, "lr_decay_style must be one of"),
    (dict(wd_incr_style="exp"), ValueError, "wd_incr_style must be one of"),
    (dict(lr_decay_style="WSD"), ValueError, "wsd_decay_steps is required"),
    (dict(lr_decay_style="WSD", wsd_decay_steps=10), ValueError, "lr_wsd_decay_style is required"),
    (dict(lr_decay_style="WSD", wsd_decay_steps=10, lr_wsd_decay_style="step"), ValueError,
     "lr_wsd_decay_style must be one of"),
    (dict(lr_decay_style="WSD", wsd_decay_steps=111, lr_wsd_decay_style="linear"), ValueError,
     "wsd_decay_steps must be <= lr_decay_steps"),
    (dict(min_lr=2.0), ValueError, "min_lr must be <= max_lr"),
    (dict(init_lr=2.0), ValueError, "init_lr must be <= max_lr"),
    (dict(min_lr=-0.1), ValueError, "min_lr must be >= 0.0"),
    (dict(lr_decay_steps=0), ValueError, "lr_decay_steps must be an integer >= 1"),
    (dict(lr_warmup_steps=110), ValueError, "lr_warmup_steps must be < lr_decay_steps"),
    (dict(lr_warmup_steps=-1), ValueError, "lr_warmup_steps must be an integer >= 0"),
    (dict(start_wd=0.2), ValueError, "start_wd must be <= end_wd"),
    (dict(wd_incr_style="constant"), ValueError, "needs start_wd == end_wd"),
    (dict(wd_incr_steps=0), ValueError, "wd_incr_steps must be an integer >= 1"),
    (dict(override_opt_param_scheduler=True), ValueError,
     "override_opt_param_scheduler=True and use_checkpoint_opt_param_scheduler=True"),
    (dict(max_lr="1e-4"), TypeError, "max_lr must be a real number"),
    (dict(max_lr=float("nan")), ValueError, "max_lr must be a finite real number"),
    (dict(lr_decay_steps=2.5), TypeError, "lr_decay_steps must be an integer"),
    (dict(use_checkpoint_opt_param_scheduler=1), TypeError,
     "use_checkpoint_opt_param_scheduler must be True or False"),
])
def test_bad_arguments_raise_naming_the_argument_and_what_is_accepted(changes, error, message):
    with pytest.raises(error, match=message):
        _scheduler(**changes)


def test_bad_optimizer_group_and_increment_raise():
    with pytest.raises(TypeError, match="optimizer must be a ParamGroupOptimizer"):
        _scheduler(optimizer=object())
    s = _scheduler()
    with pytest.raises(TypeError, match="param_group must be a dict"):
        s.get_lr(None)
    with pytest.raises(ValueError, match=r"param_group\['max_lr'\] must be >= 0.0"):
        s.get_lr({"max_lr": -1.0})
    with pytest.raises(ValueError, match="increment must be an integer >= 0"):
        s.step(-1)
    constant = _scheduler(wd_incr_style="constant", start_wd=0.1)
    with pytest.raises(ValueError, match="needs start_wd == end_wd; the param group gives"):
        constant.get_wd({"start_wd": 0.0})


# -- overrides ----------------------------------------------------------------------------------
def test_param_group_override_helpers():
    a = nls.ParamGroupOverride(wd_mult=0.0, max_lr=1e-5)
    b = nls.ParamGroupOverride(max_lr=1e-5, wd_mult=0.0)
    assert nls.param_group_override_to_tuple(a) == nls.param_group_override_to_tuple(b) \
        == (("max_lr", 1e-5), ("wd_mult", 0.0))
    assert nls.param_group_override_to_tuple(None) is None
    assert nls.ParamGroupOverride(newvar=3) == {"newvar": 3}
    combined = nls.combine_param_group_overrides([a, None, {"min_lr": 0.0}, {"wd_mult": 0.0}])
    assert combined == {"wd_mult": 0.0, "max_lr": 1e-5, "min_lr": 0.0}
    assert nls.combine_param_group_overrides([None]) == {}
    with pytest.raises(ValueError, match="conflicting param group overrides for 'max_lr': "
                                         "1e-05 and 0.001"):
        nls.combine_param_group_overrides([a, {"max_lr": 1e-3}])
    with pytest.raises(TypeError, match="param_group_overrides must be a list"):
        nls.combine_param_group_overrides(a)


def test_variables_are_grouped_by_their_combined_overrides(graph):
    names = ["bert/embeddings/word_embeddings", "bert/embeddings/LayerNorm/gamma",
             "bert/layer_0/dense/kernel", "bert/layer_0/dense/bias", "bert/layer_0/LayerNorm/beta",
             "classifier/dense/kernel"]
    variables = [tf.compat.v1.get_variable(n, [2], use_resource=True) for n in names]
    opt = ParamGroupOptimizer(
        lambda lr, group: tf.compat.v1.train.GradientDescentOptimizer(lr),
        overrides=[(("*LayerNorm/*", "*/bias"), nls.ParamGroupOverride(wd_mult=0.0)),
                   ("*embeddings*", nls.ParamGroupOverride(max_lr=0.1, min_lr=0.01)),
                   (lambda v: v.name.startswith("classifier"), {"wd_mult": 0.0})])
    groups = opt.add_variables(variables)
    by_name = {tuple(v.name[:-2] for v in g["params"]): {k: g[k] for k in g if k != "params"}
               for g in groups}
    assert by_name == {
        ("bert/embeddings/word_embeddings",): {"max_lr": 0.1, "min_lr": 0.01,
                                               "default_config": False},
        ("bert/embeddings/LayerNorm/gamma",): {"max_lr": 0.1, "min_lr": 0.01, "wd_mult": 0.0,
                                               "default_config": False},
        ("bert/layer_0/dense/kernel",): {"default_config": True},
        ("bert/layer_0/dense/bias", "bert/layer_0/LayerNorm/beta", "classifier/dense/kernel"):
            {"wd_mult": 0.0, "default_config": False},
    }
    with pytest.raises(ValueError, match="conflicting param group overrides for 'wd_mult'"):
        ParamGroupOptimizer(lambda lr, g: None, overrides={"*": {"wd_mult": 0.0},
                                                           "*kernel": {"wd_mult": 0.5}}
                            ).add_variables(variables)
    with pytest.raises(TypeError, match=r"overrides\[0\]: a key must be a glob string"):
        ParamGroupOptimizer(lambda lr, g: None, overrides=[(3, {})])
    with pytest.raises(ValueError, match=r"overrides\[0\]\['wd_mult'\] must be >= 0.0"):
        ParamGroupOptimizer(lambda lr, g: None, overrides=[("*", {"wd_mult": -1.0})])


# -- applied to variables, under one loss-scale decision ----------------------------------------
def _model(graph_overrides=None, manager=None, fp16=False):
    """w (decayed, default group), b (bias: no decay), e (lr x0.1): loss = sum(w*x) + sum(b*x)
    + sum(e*x); plain SGD inner optimizers, so each update is exactly lr * grad."""
    w = tf.compat.v1.get_variable("dense/kernel", initializer=tf.constant([1.0, 2.0]),
                                  use_resource=True)
    b = tf.compat.v1.get_variable("dense/bias", initializer=tf.constant([1.0, 2.0]),
                                  use_resource=True)
    e = tf.compat.v1.get_variable("embeddings/table", initializer=tf.constant([1.0, 2.0]),
                                  use_resource=True)
    x = tf.compat.v1.placeholder(tf.float32, [2])
    step = tf.compat.v1.train.get_or_create_global_step()
    opt = ParamGroupOptimizer(
        lambda lr, group: tf.compat.v1.train.GradientDescentOptimizer(lr),
        overrides=graph_overrides or [("*bias", nls.ParamGroupOverride(wd_mult=0.0)),
                                      ("*embeddings*", nls.ParamGroupOverride(max_lr=0.1,
                                                                              min_lr=0.0))])
    scheduler = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=1.0, min_lr=0.0, lr_warmup_steps=2, lr_decay_steps=6,
        lr_decay_style="linear", start_wd=0.1, end_wd=0.2, wd_incr_steps=4,
        wd_incr_style="linear")
    lso = nls.NPULossScaleOptimizer(opt, manager or nls.FixedLossScaleManager(loss_scale=16.0))
    wx = w * x
    if fp16:
        wx = tf.cast(nls.saturate(tf.cast(wx, tf.float16)), tf.float32)
    loss = tf.reduce_sum(wx) + tf.reduce_sum(b * x) + tf.reduce_sum(e * x)
    train = lso.minimize(loss, global_step=step)
    return dict(w=w, b=b, e=e, x=x, step=step, opt=opt, lso=lso, scheduler=scheduler,
                train=train)


def test_each_group_gets_its_rate_and_decoupled_weight_decay_and_skipped_steps_change_nothing(
        graph, session):
    m = _model()
    session.run(tf.compat.v1.global_variables_initializer())
    reference = Reference(0.0, 1.0, 0.0, 2, 6, "linear", 0.1, 0.2, 4, "linear")
    w, b, e = np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array([1.0, 2.0])
    x = np.array([1.0, 0.5])
    feeds = [x, x, [np.inf, 1.0], x, [np.nan, 0.0], x, x, x, x]
    applied = 0
    for i, feed in enumerate(feeds):
        session.run(m["train"], {m["x"]: feed})
        if np.all(np.isfinite(feed)):
            lr, wd = reference.lr(applied), reference.wd(applied)
            lr_e = reference.lr(applied, {"max_lr": 0.1, "min_lr": 0.0})
            w = w - lr * wd * w - lr * x                 # decay on the value before the update
            b = b - lr * x                               # wd_mult = 0
            e = e - lr_e * wd * e - lr_e * x
            applied += 1
        got = session.run([m["w"], m["b"], m["e"], m["step"], m["scheduler"].num_steps_variable])
        np.testing.assert_allclose(got[0], w, rtol=1e-6, err_msg="iteration %d" % i)
        np.testing.assert_allclose(got[1], b, rtol=1e-6, err_msg="iteration %d" % i)
        np.testing.assert_allclose(got[2], e, rtol=1e-6, err_msg="iteration %d" % i)
        assert got[3:] == [applied, applied]
    assert session.run(m["lso"].skipped_steps) == 2
    assert m["scheduler"].state_dict(session)["num_steps"] == applied == m["scheduler"].num_steps


def test_an_overflow_only_the_register_sees_skips_every_group_and_the_schedule(graph, session):
    # fp16 saturation: at a loss scale of 2**20 the gradient through the float16 boundary
    # saturates to 65504 (finite), and only the emulated float-status register records it.
    m = _model(manager=nls.ExponentialUpdateLossScaleManager(
        init_loss_scale=2.0 ** 20, incr_every_n_steps=1000, decr_every_n_nan_or_inf=1,
        decr_ratio=2.0 ** -10), fp16=True)
    session.run(tf.compat.v1.global_variables_initializer())
    start = session.run([m["w"], m["b"], m["e"]])
    session.run(m["train"], {m["x"]: [1.0, 0.5]})
    for old, new in zip(start, session.run([m["w"], m["b"], m["e"]])):
        np.testing.assert_array_equal(old, new)
    assert session.run([m["step"], m["scheduler"].num_steps_variable, m["lso"].skipped_steps]) \
        == [0, 0, 1]
    for _ in range(2):                       # at 2**10: applied with lr(0) = 0, then lr(1)
        session.run(m["train"], {m["x"]: [1.0, 0.5]})
    assert session.run([m["step"], m["scheduler"].num_steps_variable, m["lso"].skipped_steps]) \
        == [2, 2, 1]
    x, ref = np.array([1.0, 0.5]), Reference(0.0, 1.0, 0.0, 2, 6, "linear", 0.1, 0.2, 4, "linear")
    lr, wd = ref.lr(1), ref.wd(1)
    np.testing.assert_allclose(session.run(m["w"]), start[0] - lr * wd * start[0] - lr * x,
                               rtol=1e-6)
    np.testing.assert_allclose(session.run(m["b"]), start[1] - lr * x, rtol=1e-6)


@tf2_only
def test_eager_step_drives_rates_and_weight_decay():
    assert tf.executing_eagerly()
    w = tf.Variable([1.0, 2.0])
    b = tf.Variable([1.0, 2.0], name="bias")
    opt = ParamGroupOptimizer(lambda lr, group: tf.compat.v1.train.GradientDescentOptimizer(lr),
                              overrides=[("bias", {"wd_mult": 0.0})])
    opt.add_variables([w, b])
    scheduler = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=1.0, min_lr=0.0,
                                        lr_warmup_steps=2, lr_decay_steps=6,
                                        lr_decay_style="cosine", start_wd=0.1, end_wd=0.1,
                                        wd_incr_steps=0, wd_incr_style="constant")
    reference = Reference(0.0, 1.0, 0.0, 2, 6, "cosine", 0.1, 0.1, 0, "constant")
    want_w, want_b, grad = np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array([0.5, -1.0])
    for n in range(8):
        opt.apply_gradients([(tf.constant(grad, tf.float32), w), (tf.constant(grad, tf.float32),
                                                                  b)])
        lr = reference.lr(n)
        want_w = want_w - lr * 0.1 * want_w - lr * grad
        want_b = want_b - lr * grad
        scheduler.step(1)
        np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-6)
        np.testing.assert_allclose(b.numpy(), want_b, rtol=1e-6)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([reference.lr(8)] * 2)


def test_apply_without_a_scheduler_or_under_a_strategy_is_an_error(graph):
    v = tf.compat.v1.get_variable("v", [1], use_resource=True)
    opt = ParamGroupOptimizer(lambda lr, group: tf.compat.v1.train.GradientDescentOptimizer(lr))
    with pytest.raises(RuntimeError, match="needs an OptimizerParamScheduler"):
        opt.apply_gradients([(tf.ones([1]), v)])
    _scheduler(opt)
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        with pytest.raises(NotImplementedError, match="does not support tf.distribute"):
            opt.apply_gradients([(tf.ones([1]), v)])
    for bad, error in ((0, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="increment must be an integer >= 1"):
            ParamGroupOptimizer(lambda lr, group: None, increment=bad)


# -- checkpoints ---------------------------------------------------------------------------------
def test_state_dict_holds_num_steps_and_the_compared_values_only():
    s = _scheduler(lr_decay_style="WSD", wsd_decay_steps=5, lr_wsd_decay_style="linear")
    s.step(7)
    assert s.state_dict() == {
        "max_lr": 1.0, "min_lr": 0.1, "lr_warmup_steps": 10, "lr_decay_steps": 110,
        "lr_decay_style": "WSD", "start_wd": 0.0, "end_wd": 0.1, "wd_incr_steps": 100,
        "wd_incr_style": "linear", "num_steps": 7}


def test_checkpoint_rules_override_use_checkpoint_and_neither():
    saved = _scheduler(max_lr=2.0, min_lr=0.2)
    saved.step(30)
    state = saved.state_dict()

    mine = _scheduler(override_opt_param_scheduler=True, use_checkpoint_opt_param_scheduler=False)
    mine.load_state_dict(state)
    assert (mine.max_lr, mine.min_lr, mine.num_steps) == (1.0, 0.1, 30)     # constructor wins

    theirs = _scheduler()                                                   # default: checkpoint
    theirs.load_state_dict(state)
    assert (theirs.max_lr, theirs.min_lr, theirs.num_steps) == (2.0, 0.2, 30)
    assert theirs.get_lr({}) == saved.get_lr({})

    strict = _scheduler(use_checkpoint_opt_param_scheduler=False)
    with pytest.raises(ValueError, match=r"constructor's max_lr \(learning rate\) is 1.0 but the "
                                         r"checkpoint holds 2.0"):
        strict.load_state_dict(state)
    same = _scheduler(use_checkpoint_opt_param_scheduler=False, max_lr=2.0, min_lr=0.2)
    same.load_state_dict(state)
    assert same.num_steps == 30
    style = _scheduler(use_checkpoint_opt_param_scheduler=False, lr_decay_style="cosine",
                       max_lr=2.0, min_lr=0.2)
    with pytest.raises(ValueError, match="lr_decay_style"):
        style.load_state_dict(state)
    with pytest.raises(KeyError, match="num_steps"):
        _scheduler().load_state_dict({k: v for k, v in state.items() if k != "num_steps"})
    wsd_needed = _scheduler()
    with pytest.raises(ValueError, match="wsd_decay_steps is required"):
        wsd_needed.load_state_dict(dict(state, lr_decay_style="WSD"))
    assert wsd_needed.lr_decay_style == "linear"                 # left as it was


class _Groups:
    """A plain optimizer: a ``param_groups`` list of dicts."""

    def __init__(self, *groups):
        self.param_groups = [dict(g) for g in groups]


@pytest.mark.parametrize("key, value, error, accepted", [
    ("lr_decay_style", "bogus", ValueError, "'inverse-square-root', 'WSD'"),
    ("lr_decay_style", None, ValueError, "'constant', 'linear'"),
    ("wd_incr_style", "nope", ValueError, "'constant', 'linear', 'cosine'"),
    ("wd_incr_style", 3, ValueError, "'constant', 'linear', 'cosine'"),
    ("num_steps", -1, ValueError, "integer >= 0"),
    ("num_steps", 2.5, TypeError, "integer >= 0"),
    ("num_steps", "7", TypeError, "integer >= 0"),
    ("num_steps", 2 ** 63, ValueError, "int64"),
    ("lr_decay_steps", True, TypeError, "integer >= 0"),
    ("max_lr", float("nan"), ValueError, "finite"),
    ("min_lr", -0.5, ValueError, ">= 0"),
    ("end_wd", "0.1", TypeError, "real number"),
])
@pytest.mark.parametrize("rules", [
    dict(),
    dict(override_opt_param_scheduler=True, use_checkpoint_opt_param_scheduler=False),
])
def test_load_state_dict_checks_every_value_first_and_a_failed_load_changes_nothing(
        key, value, error, accepted, rules):
    s = _scheduler(_Groups({}, {"max_lr": 2.0, "wd_mult": 0.0}), **rules)
    s.step(3)
    before = s.state_dict()
    groups_before = [dict(g) for g in s.optimizer.param_groups]
    bad = dict(before, lr_decay_style="cosine", num_steps=7, max_lr=1.5)
    bad[key] = value
    with pytest.raises(error) as info:
        s.load_state_dict(bad)
    message = str(info.value)
    assert "state_dict[%r]" % key in message and repr(value) in message
    assert accepted in message
    assert s.state_dict() == before
    assert s.optimizer.param_groups == groups_before
    # still usable: the formulas run on the state it kept
    assert s.get_lr({}) == pytest.approx(Reference(
        0.0, 1.0, 0.1, 10, 110, "linear", 0.0, 0.1, 100, "linear").lr(3))
    assert s.get_wd() == pytest.approx(0.1 * 3 / 100)


def test_a_load_refused_while_setting_the_groups_is_rolled_back():
    # The checkpoint's values fit together, but a group's own start_wd/end_wd do not fit the
    # checkpoint's 'constant' weight decay: refused when the groups are set, after the Python
    # state was assigned, and undone.
    s = _scheduler(_Groups({}, {"start_wd": 0.0, "end_wd": 0.3}))
    s.step(4)
    before = s.state_dict()
    groups_before = [dict(g) for g in s.optimizer.param_groups]
    loaded = dict(before, wd_incr_style="constant", start_wd=0.1, end_wd=0.1, num_steps=9)
    with pytest.raises(ValueError, match="wd_incr_style='constant' needs start_wd == end_wd"):
        s.load_state_dict(loaded)
    assert s.state_dict() == before
    assert s.optimizer.param_groups == groups_before


def test_a_graph_checkpoint_with_an_unknown_style_changes_nothing():
    with tf.Graph().as_default():
        s = _scheduler()
        variables = s._graph_vars()  # pylint: disable=protected-access
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            variables["lr_decay_style"].load(b"bogus", session)
            variables["num_steps"].load(7, session)
            stored = session.run(variables)
            with pytest.raises(ValueError, match=r"state_dict\['lr_decay_style'\] must be one of "
                                                 r"'constant'.*; got 'bogus'"):
                s.apply_checkpoint_rules(session)
            assert session.run(variables) == stored
            assert (s.lr_decay_style, s.num_steps) == ("linear", 0)
            with pytest.raises(ValueError, match="got 'bogus'"):
                s.state_dict(session=session)
            assert (s.lr_decay_style, s.num_steps) == ("linear", 0)


def _save_graph_checkpoint(path, **changes):
    with tf.Graph().as_default():
        m_vars = _scheduler(**changes)
        variables = m_vars.variables()
        advance = m_vars.advance(5)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(advance)
            return tf.compat.v1.train.Saver(variables).save(session, path)


@pytest.mark.parametrize("flags, max_lr, error", [
    (dict(), 2.0, None),
    (dict(override_opt_param_scheduler=True, use_checkpoint_opt_param_scheduler=False), 1.0, None),
    (dict(use_checkpoint_opt_param_scheduler=False), None, "max_lr"),
])
def test_graph_checkpoint_rules_after_a_saver_restore(tmp_path, flags, max_lr, error):
    path = _save_graph_checkpoint(str(tmp_path / "ckpt"), max_lr=2.0)
    with tf.Graph().as_default():
        s = _scheduler(**flags)
        lr = s.lr_tensor({})
        saver = tf.compat.v1.train.Saver(s.variables())
        with tf.compat.v1.Session() as session:
            saver.restore(session, path)
            if error:
                with pytest.raises(ValueError, match=error):
                    s.apply_checkpoint_rules(session)
                return
            s.apply_checkpoint_rules(session)
            assert session.run(s.num_steps_variable) == 5 and s.num_steps == 5
            assert s.max_lr == max_lr
            assert session.run(lr) == pytest.approx(Reference(
                0.0, max_lr, 0.1, 10, 110, "linear", 0.0, 0.1, 100, "linear").lr(5))


def test_checkpoint_rules_hook_runs_after_a_monitored_session_restores(tmp_path):
    def build(max_lr, **flags):
        step = tf.compat.v1.train.get_or_create_global_step()
        v = tf.compat.v1.get_variable("v", initializer=tf.constant([1.0]), use_resource=True)
        opt = ParamGroupOptimizer(lambda lr, g: tf.compat.v1.train.GradientDescentOptimizer(lr))
        s = _scheduler(opt, max_lr=max_lr, **flags)
        train = opt.apply_gradients([(tf.ones([1]), v)], global_step=step)
        return s, train

    with tf.Graph().as_default():
        s, train = build(1.0)
        with tf.compat.v1.train.MonitoredTrainingSession(
                checkpoint_dir=str(tmp_path), save_checkpoint_steps=1, save_summaries_steps=None,
                hooks=[s.checkpoint_rules_hook()]) as session:
            for _ in range(3):
                session.run(train)
    with tf.Graph().as_default():
        s, train = build(0.5, use_checkpoint_opt_param_scheduler=False)
        with pytest.raises(ValueError, match="the checkpoint holds 1.0"):
            with tf.compat.v1.train.MonitoredTrainingSession(
                    checkpoint_dir=str(tmp_path), save_checkpoint_steps=None,
                    save_summaries_steps=None, hooks=[s.checkpoint_rules_hook()]):
                pass
    with tf.Graph().as_default():
        s, train = build(0.5)
        with tf.compat.v1.train.MonitoredTrainingSession(
                checkpoint_dir=str(tmp_path), save_checkpoint_steps=None,
                save_summaries_steps=None, hooks=[s.checkpoint_rules_hook()]) as session:
            assert s.num_steps == 3 and s.max_lr == 1.0
            assert session.run(s.num_steps_variable) == 3


def test_warmup_decay_schedule_is_a_face_of_the_same_formulas():
    s = nls.WarmupDecaySchedule(max_lr=1.0, warmup_steps=10, decay_steps=110,
                                decay_style="cosine", min_lr=0.1)
    p = _scheduler(lr_decay_style="cosine")
    for n in (0, 5, 10, 37, 110, 111):
        p.num_steps = n
        assert s.value_at(n) == p.get_lr({})
    assert math.isclose(s.value_at(60), 0.55)
