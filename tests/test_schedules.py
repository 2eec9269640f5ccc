"""Learning-rate schedules (npu_loss_scale.schedules): Megatron's warmup/decay styles."""
import math

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.schedules import (DECAY_STYLES, WarmupDecaySchedule,
                                      warmup_decay_learning_rate)


def _graph_values(schedule, steps):
    """Evaluates the graph schedule at each step (through an int64 step variable)."""
    with tf.Graph().as_default():
        step = tf.compat.v1.placeholder(tf.int64, [])
        lr = schedule(step)
        assert lr.dtype == tf.float32
        with tf.compat.v1.Session() as session:
            return [float(session.run(lr, {step: s})) for s in steps]


# -- values at hand-computed points --------------------------------------------------------------
def test_linear_warmup_then_linear_decay():
    s = WarmupDecaySchedule(max_lr=1.0, warmup_steps=10, decay_steps=110, decay_style="linear",
                            min_lr=0.1)
    assert s.value_at(0) == 0.0
    assert s.value_at(5) == pytest.approx(0.5)
    assert s.value_at(10) == pytest.approx(1.0)
    assert s.value_at(60) == pytest.approx(0.55)            # halfway: (1.0 + 0.1) / 2
    assert s.value_at(85) == pytest.approx(0.1 + 0.9 * 0.25)
    assert s.value_at(110) == pytest.approx(0.1)
    assert s.value_at(111) == 0.1 and s.value_at(10 ** 6) == 0.1


def test_init_lr_is_the_start_of_warmup():
    s = WarmupDecaySchedule(max_lr=2.0, warmup_steps=4, decay_steps=8, init_lr=1.0)
    assert [s.value_at(i) for i in range(5)] == pytest.approx([1.0, 1.25, 1.5, 1.75, 2.0])


def test_cosine_decay():
    s = WarmupDecaySchedule(max_lr=1.0, warmup_steps=0, decay_steps=100, decay_style="cosine",
                            min_lr=0.2)
    assert s.value_at(0) == pytest.approx(1.0)
    assert s.value_at(25) == pytest.approx(0.2 + 0.8 * (1 + math.cos(math.pi / 4)) / 2)
    assert s.value_at(50) == pytest.approx(0.6)
    assert s.value_at(100) == pytest.approx(0.2)
    assert s.value_at(150) == 0.2


def test_inverse_square_root_decay():
    s = WarmupDecaySchedule(max_lr=1.0, warmup_steps=100, decay_style="inverse-square-root")
    assert s.value_at(50) == pytest.approx(0.5)             # warmup
    assert s.value_at(100) == pytest.approx(1.0)
    assert s.value_at(400) == pytest.approx(0.5)            # sqrt(100 / 400)
    assert s.value_at(10000) == pytest.approx(0.1)
    floored = WarmupDecaySchedule(max_lr=1.0, warmup_steps=100, min_lr=0.3,
                                  decay_style="inverse-square-root")
    assert floored.value_at(10000) == pytest.approx(0.3)
    no_warmup = WarmupDecaySchedule(max_lr=1.0, decay_style="inverse-square-root")
    assert no_warmup.value_at(0) == 1.0 and no_warmup.value_at(4) == pytest.approx(0.5)
    cut = WarmupDecaySchedule(max_lr=1.0, warmup_steps=4, decay_steps=16, min_lr=0.01,
                              decay_style="inverse-square-root")
    assert cut.value_at(16) == pytest.approx(0.5) and cut.value_at(17) == 0.01


def test_constant_after_warmup_forever():
    s = WarmupDecaySchedule(max_lr=0.3, warmup_steps=3, decay_steps=5, decay_style="constant",
                            min_lr=0.01)
    assert s.value_at(0) == 0.0 and s.value_at(3) == pytest.approx(0.3)
    assert s.value_at(4) == 0.3 and s.value_at(10 ** 7) == 0.3


# -- the graph agrees with the Python values -----------------------------------------------------
@pytest.mark.parametrize("style", DECAY_STYLES)
@pytest.mark.parametrize("warmup", [0, 7])
def test_graph_matches_python_at_every_step(style, warmup):
    schedule = WarmupDecaySchedule(max_lr=3e-4, warmup_steps=warmup, decay_steps=40,
                                   decay_style=style, min_lr=1e-5, init_lr=1e-6)
    steps = list(range(0, 50)) + [100, 10 ** 6]
    got = _graph_values(schedule, steps)
    want = [schedule.value_at(s) for s in steps]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-12)


def test_functional_form_and_default_global_step():
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        lr = warmup_decay_learning_rate(step, 1.0, warmup_steps=4, decay_steps=8)
        default = WarmupDecaySchedule(1.0, warmup_steps=4, decay_steps=8)()  # uses global step
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(step.assign(2))
            assert session.run([lr, default]) == pytest.approx([0.5, 0.5])
            session.run(step.assign(6))
            assert session.run([lr, default]) == pytest.approx([0.5, 0.5])


# -- argument checks -----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(max_lr=1.0, decay_style="step"), "decay_style must be one of"),
    (dict(max_lr=1.0, decay_style="linear"), "decay_steps is required"),
    (dict(max_lr=1.0, decay_style="cosine", warmup_steps=10, decay_steps=10),
     "decay_steps must be > warmup_steps"),
    (dict(max_lr=1.0, min_lr=2.0, decay_steps=5), "min_lr must be <= max_lr"),
    (dict(max_lr=1.0, init_lr=2.0, decay_steps=5), "init_lr must be <= max_lr"),
    (dict(max_lr=-1.0, decay_steps=5), "max_lr must be >= 0"),
    (dict(max_lr=1.0, warmup_steps=-1, decay_steps=5), "warmup_steps must be an integer >= 0"),
])
def test_bad_arguments_raise_value_errors_that_say_what_is_accepted(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WarmupDecaySchedule(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(max_lr="1e-4", decay_steps=5),
                                    dict(max_lr=float("nan"), decay_steps=5),
                                    dict(max_lr=1.0, warmup_steps=2.5, decay_steps=5),
                                    dict(max_lr=1.0, decay_steps=True)])
def test_wrong_types_raise_type_errors(kwargs):
    with pytest.raises(TypeError):
        WarmupDecaySchedule(**kwargs)


# -- skipped steps: the schedule waits -----------------------------------------------------------
def test_a_skipped_step_does_not_advance_the_schedule(graph, session):
    w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 1.0]), use_resource=True)
    x = tf.compat.v1.placeholder(tf.float32, [2])
    step = tf.compat.v1.train.get_or_create_global_step()
    lr = WarmupDecaySchedule(max_lr=1.0, warmup_steps=4, decay_steps=8)(step)
    opt = nls.NPULossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(lr),
        nls.ExponentialUpdateLossScaleManager(init_loss_scale=2.0 ** 8, incr_every_n_steps=1000,
                                              decr_every_n_nan_or_inf=2, decr_ratio=0.5))
    train = opt.minimize(tf.reduce_sum(w * x), global_step=step)
    session.run(tf.compat.v1.global_variables_initializer())

    session.run(train, {x: [1.0, 1.0]})                       # applied with lr(0) = 0
    session.run(train, {x: [1.0, 1.0]})                       # applied with lr(1) = 0.25
    assert session.run([step, lr]) == [2, 0.5]
    np.testing.assert_allclose(session.run(w), [0.75, 0.75])
    for _ in range(3):                                        # overflowed: skipped
        session.run(train, {x: [float("inf"), 1.0]})
    assert session.run([step, lr]) == [2, 0.5]                # the schedule waited
    assert session.run(opt.skipped_steps) == 3
    np.testing.assert_allclose(session.run(w), [0.75, 0.75])
    session.run(train, {x: [1.0, 1.0]})                       # applied with lr(2) = 0.5
    np.testing.assert_allclose(session.run(w), [0.25, 0.25])
    assert session.run([step, lr]) == [3, 0.75]
