"""The Ascend BERT flag -> loss-scale manager mapping (npu_loss_scale.ascend.flags)."""
import math

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.ascend.flags import loss_scale_manager_from_flag


def _value(session, manager):
    return float(session.run(manager.get_loss_scale()))


def test_zero_gives_the_dynamic_manager_with_the_ascend_bert_defaults(graph, session):
    manager = loss_scale_manager_from_flag(0)
    assert type(manager) is nls.ExponentialUpdateLossScaleManager
    assert manager.get_config() == {
        "init_loss_scale": 2.0 ** 32, "incr_every_n_steps": 1000,
        "decr_every_n_nan_or_inf": 2, "incr_ratio": 2.0, "decr_ratio": 0.5}
    assert manager.get_enable_overflow_check() is True
    session.run(tf.compat.v1.global_variables_initializer())
    assert _value(session, manager) == 2.0 ** 32


def test_dynamic_manager_behaves_like_bert_halve_after_two_overflows_grow_after_1000(graph,
                                                                                    session):
    manager = loss_scale_manager_from_flag(0, init_loss_scale_value=2.0 ** 10)
    finite = tf.compat.v1.placeholder(tf.bool, [])
    update = manager.update_loss_scale(finite)
    session.run(tf.compat.v1.global_variables_initializer())
    assert _value(session, manager) == 1024.0
    session.run(update, {finite: False})
    assert _value(session, manager) == 1024.0          # one overflow: not yet
    session.run(update, {finite: False})
    assert _value(session, manager) == 512.0           # second: x0.5 (not TF's or Ascend's 0.8)
    for _ in range(999):
        session.run(update, {finite: True})
    assert _value(session, manager) == 512.0
    session.run(update, {finite: True})
    assert _value(session, manager) == 1024.0          # 1000th consecutive good step: x2


@pytest.mark.parametrize("init", [1, 2.0 ** 15, 2 ** 32, 3.0e38])
def test_init_loss_scale_value_is_used_only_for_the_dynamic_manager(graph, session, init):
    dynamic = loss_scale_manager_from_flag(0, init_loss_scale_value=init)
    fixed = loss_scale_manager_from_flag(8, init_loss_scale_value=init)
    session.run(tf.compat.v1.global_variables_initializer())
    assert _value(session, dynamic) == np.float32(init)
    assert _value(session, fixed) == 8.0


@pytest.mark.parametrize("flag, expected", [(1, 1.0), (1024, 1024.0), (65536.0, 65536.0),
                                            (1.5, 1.5), ("512", 512.0), (" 2048 ", 2048.0),
                                            (np.int64(4096), 4096.0), (2 ** 32, 2.0 ** 32)])
def test_at_least_one_gives_a_fixed_manager_at_that_value(graph, session, flag, expected):
    manager = loss_scale_manager_from_flag(flag)
    assert type(manager) is nls.FixedLossScaleManager
    assert manager.get_enable_overflow_check() is True
    assert _value(session, manager) == expected


def test_string_zero_is_dynamic(graph):
    assert type(loss_scale_manager_from_flag("0")) is nls.ExponentialUpdateLossScaleManager


@pytest.mark.parametrize("flag", [-1, -1024, 0.5, 0.999, 1e-9, -0.5, float("nan"), float("inf"),
                                  float("-inf"), "abc", "", None, True, False, [1], "nan"])
def test_anything_else_is_a_clear_value_error(graph, flag):
    with pytest.raises(ValueError) as info:
        loss_scale_manager_from_flag(flag)
    message = str(info.value)
    assert "npu_bert_loss_scale" in message                 # names the argument
    assert repr(flag) in message                            # shows the value received
    assert "0 (dynamic" in message and ">= 1" in message    # says what is accepted


def test_bad_init_value_raises_the_managers_error_naming_it(graph):
    with pytest.raises(ValueError, match="init_loss_scale"):
        loss_scale_manager_from_flag(0, init_loss_scale_value=0.5)
    with pytest.raises((TypeError, ValueError), match="init_loss_scale"):
        loss_scale_manager_from_flag(0, init_loss_scale_value=math.nan)


def test_the_manager_from_the_flag_drives_the_optimizer(graph, session):
    """End to end: flag 0 -> the optimizer starts at 2**32 and skips overflowed steps."""
    w = tf.compat.v1.get_variable("w", initializer=tf.ones([3]), use_resource=True)
    x = tf.compat.v1.placeholder(tf.float32, [3])
    loss = tf.reduce_sum(w * x)
    step = tf.compat.v1.train.get_or_create_global_step()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                    loss_scale_manager_from_flag(0))
    train = opt.minimize(loss, global_step=step)
    session.run(tf.compat.v1.global_variables_initializer())
    assert session.run(opt.loss_scale) == 2.0 ** 32
    bad = [1.0, float("inf"), 1.0]
    session.run(train, {x: bad})
    session.run(train, {x: bad})
    assert session.run(step) == 0
    assert session.run(opt.loss_scale) == 2.0 ** 31
    np.testing.assert_array_equal(session.run(w), [1, 1, 1])
    session.run(train, {x: [1.0, 2.0, 3.0]})
    assert session.run(step) == 1
    np.testing.assert_allclose(session.run(w), [0.9, 0.8, 0.7], rtol=1e-6)
