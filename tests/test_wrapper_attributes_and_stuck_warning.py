"""NPULossScaleOptimizer keeps its private attributes to itself, and a scale stuck at its minimum
is reported once per step whoever owns the rule."""
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from warned import stuck


def _sgd():
    return tf.compat.v1.train.GradientDescentOptimizer(0.1)


def test_private_attributes_are_not_forwarded_to_the_inner_optimizer():
    inner = _sgd()
    inner._only_inner = 3       # pylint: disable=protected-access
    inner.only_inner = 4
    opt = nls.NPULossScaleOptimizer(inner, nls.FixedLossScaleManager(4))
    with pytest.raises(AttributeError, match=r"'NPULossScaleOptimizer' object has no attribute "
                                             r"'_only_inner' \(private attributes are not "
                                             r"forwarded to the inner optimizer\)"):
        getattr(opt, "_only_inner")
    assert not hasattr(opt, "_learning_rte")           # a misspelt private name
    assert opt.only_inner == 4                           # public ones still come from the inner


def _overflowed_step(manager, recwarn):
    """Runs one overflowed step through NPULossScaleOptimizer; returns the messages of the
    LossScaleStuckWarnings it gave."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        w = tf.compat.v1.get_variable("w", initializer=1.0)
        poison = tf.compat.v1.placeholder_with_default(1.0, [])
        opt = nls.NPULossScaleOptimizer(_sgd(), manager)
        train = opt.minimize(w * poison)
        sess.run(tf.compat.v1.global_variables_initializer())
        stuck(recwarn)
        sess.run(train, {poison: float("inf")})
        assert sess.run(w) == 1.0                       # skipped
        return stuck(recwarn)


def test_stuck_at_min_scale_is_reported_once_per_step_for_a_megatron_scaler(recwarn):
    found = _overflowed_step(nls.DynamicGradScaler(1.0, 1.0, 2.0, 0.5, 10, 1), recwarn)
    assert len(found) == 1, found
    assert "overflowed at the minimum loss scale" in found[0]


def test_stuck_at_scale_one_is_still_reported_for_a_fixed_manager(recwarn):
    found = _overflowed_step(nls.FixedLossScaleManager(1), recwarn)
    assert len(found) == 1, found
    assert "cannot go lower" in found[0]


def test_a_megatron_scaler_above_its_minimum_is_not_called_stuck_at_one(recwarn):
    # min_scale 0.25: at scale 1 the scale can still go lower, so no warning at all
    found = _overflowed_step(nls.DynamicGradScaler(1.0, 0.25, 2.0, 0.5, 10, 1), recwarn)
    assert found == [], found
