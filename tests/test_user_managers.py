"""Users' own loss-scale managers: the two-method contract of contrib's and Ascend's managers.

A manager written for ``tf.contrib.mixed_precision`` or Ascend's TF1 adapter implements only
``get_loss_scale()`` and ``update_loss_scale(finite_grads)`` and keeps its own variables. Both a
subclass of the package's ``LossScaleManager`` written that way and a plain object with those
two methods must drive ``NPULossScaleOptimizer``, which calls ``update_loss_scale`` once per
step inside the train op.
"""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls


class _CountingRule:
    """The rule the managers below implement, in plain Python: finite -> scale + 1, overflow ->
    scale / 2; every update counted."""

    def __init__(self, scale):
        self.scale, self.updates = float(scale), 0

    def update(self, finite):
        self.scale = self.scale + 1 if finite else self.scale / 2
        self.updates += 1


def _own_variables(scale):
    scale_var = tf.compat.v1.get_variable("user_scale", initializer=float(scale),
                                          trainable=False, use_resource=True)
    count_var = tf.compat.v1.get_variable("user_updates", initializer=0, dtype=tf.int32,
                                          trainable=False, use_resource=True)
    return scale_var, count_var


def _update(scale_var, count_var, finite):
    new_scale = tf.cond(finite, lambda: scale_var + 1.0, lambda: scale_var / 2.0)
    return tf.group(scale_var.assign(new_scale), count_var.assign_add(1))


class SubclassManager(nls.LossScaleManager):
    """Two methods only; the constructor does not call the base class's (contrib's had none)."""

    def __init__(self, scale):  # pylint: disable=super-init-not-called
        self.scale_var, self.count_var = _own_variables(scale)

    def get_loss_scale(self):
        return self.scale_var.read_value()

    def update_loss_scale(self, finite_grads):
        return _update(self.scale_var, self.count_var, finite_grads)


class PlainManager:
    """Not a LossScaleManager at all: an object with the two methods."""

    def __init__(self, scale):
        self.scale_var, self.count_var = _own_variables(scale)

    def get_loss_scale(self):
        return self.scale_var.read_value()

    def update_loss_scale(self, finite_grads):
        return _update(self.scale_var, self.count_var, finite_grads)


@pytest.mark.parametrize("make", [SubclassManager, PlainManager], ids=["subclass", "plain"])
@pytest.mark.parametrize("backend", ["emulation", "inf_nan"])
def test_a_users_two_method_manager_drives_the_optimizer(graph, make, backend):
    x = tf.compat.v1.placeholder(tf.float32, [])
    w = tf.compat.v1.get_variable("w", initializer=1.0, use_resource=True)
    mgr = make(8.0)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), mgr,
                                    backend=backend)
    assert opt.loss_scale_manager is mgr
    step = tf.compat.v1.train.get_or_create_global_step()
    train = opt.minimize(w * x, global_step=step)
    rule, expected_w, expected_step = _CountingRule(8.0), 1.0, 0
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for value in [1.0, 2.0, np.inf, 0.5, np.nan, 1.0]:
            sess.run(train, {x: value})
            finite = bool(np.isfinite(value))
            rule.update(finite)
            if finite:
                expected_w -= 0.5 * value
                expected_step += 1
            got_w, got_scale, got_updates, got_step = sess.run(
                [w, mgr.scale_var, mgr.count_var, step])
            assert got_scale == pytest.approx(rule.scale)
            assert got_updates == rule.updates     # exactly one update per step
            assert got_w == pytest.approx(expected_w)
            assert got_step == expected_step       # a skipped step leaves global_step alone


def test_a_users_subclass_can_be_instantiated_and_says_it_has_no_config(graph):
    mgr = SubclassManager(4.0)
    assert mgr.get_enable_overflow_check() is True
    with pytest.raises(NotImplementedError, match="SubclassManager.*get_config"):
        mgr.get_config()


@pytest.mark.parametrize("obj, missing", [
    (object(), "get_loss_scale\\(\\) and no update_loss_scale\\(\\)"),
    (type("OnlyGet", (), {"get_loss_scale": lambda self: 1.0})(), "no update_loss_scale"),
    (4.0, "get_loss_scale"),
])
def test_an_object_without_the_two_methods_is_refused_by_name(graph, obj, missing):
    w = tf.compat.v1.get_variable("w", initializer=1.0, use_resource=True)
    del w
    with pytest.raises(TypeError, match="loss_scale_manager.*" + missing):
        nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), obj)
