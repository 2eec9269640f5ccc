"""Overflow localisation in both of the device's modes: saturation and INF/NaN."""
import math

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.device import localisation
from npu_loss_scale.device import saturation


@pytest.fixture(autouse=True)
def _localisation_off_afterwards():
    localisation.reset()
    yield
    localisation.disable()
    localisation.reset()


@pytest.mark.parametrize("npu_device", ["saturation", "inf_nan"], indirect=True)
def test_the_overflowing_exp_is_named_in_both_modes(npu_device):
    localisation.enable()
    with tf.Graph().as_default():
        with saturation.saturate_every_op():
            x = tf.compat.v1.placeholder(tf.float16, [2, 4], name="x")
            w = tf.compat.v1.get_variable("w", initializer=tf.eye(4) * 4.0)
            logits = tf.matmul(x, tf.cast(w, tf.float16), name="logits")
            e = tf.exp(logits, name="exp_of_logits")
            probs = e / tf.reduce_sum(e, axis=-1, keepdims=True)
            loss = -tf.reduce_mean(tf.math.log(tf.cast(probs, tf.float32) + 1e-3))
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                            nls.FixedLossScaleManager(1.0))
            train = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            w_before = sess.run(w)
            sess.run(train, {x: np.full([2, 4], 3.0, np.float16)})   # exp(12) > 65504
            assert sess.run(opt.skipped_steps) == 1
            np.testing.assert_array_equal(sess.run(w), w_before)
    record = localisation.last_record()
    assert record is not None, "no record in %s mode" % npu_device.sat_mode
    assert record.skipped is True
    assert record.first.op_name == "exp_of_logits"
    assert (record.first.direction, record.first.dtype) == ("forward", "float16")
    assert math.isinf(record.first.magnitude)
    # the matmul before it stayed in range: not a forward site (in INF/NaN mode the inf's
    # gradient is non-finite all the way back, so backward sites follow in both modes)
    assert ("logits", "forward") not in [(s.op_name, s.direction) for s in record.sites]
    assert record.sites[0] is record.first and record.first.first
