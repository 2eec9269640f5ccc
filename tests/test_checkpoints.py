"""Checkpoints move between the device and the CPU: Ascend's variable names, both ways.

The stand-in below writes and reads checkpoints the way a script using Ascend's
ExponentialUpdateLossScaleManager does: TF1 (ref) variables named ``loss_scale``, ``good_steps``
and ``bad_steps`` beside the model and ``global_step``, saved and restored with a plain
``tf.compat.v1.train.Saver()`` (no var_list).
"""
import numpy as np
import tensorflow as tf

import npu_loss_scale as nls
from tf_versions import tf2_only


def _model():
    w = tf.compat.v1.get_variable("w", initializer=np.array([1.0, 2.0], np.float32))
    x = tf.compat.v1.placeholder_with_default(np.ones(2, np.float32), [2], name="x")
    return w, x, tf.reduce_sum(w * x)


def _ascend_stand_in(scale, good, bad):
    """The variables a device script has: model, Momentum slots, global_step and Ascend's
    manager state (Ascend's optimizer wrapper adds no variable of its own)."""
    w, _, loss = _model()
    gs = tf.compat.v1.train.get_or_create_global_step()
    tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=gs)
    made = [tf.compat.v1.Variable(scale, name="loss_scale", trainable=False, use_resource=False),
            tf.compat.v1.Variable(good, name="good_steps", trainable=False, use_resource=False),
            tf.compat.v1.Variable(bad, name="bad_steps", trainable=False, use_resource=False)]
    return w, made


def _ours(init_scale=2.0 ** 10):
    w, x, loss = _model()
    gs = tf.compat.v1.train.get_or_create_global_step()
    mgr = nls.ExponentialUpdateLossScaleManager(init_scale, 1000, decr_every_n_nan_or_inf=2,
                                                decr_ratio=0.5)
    with tf.name_scope("train"):
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.MomentumOptimizer(0.1, 0.9), mgr)
        train = opt.minimize(loss, global_step=gs)
    return w, x, gs, mgr, opt, train


def test_a_device_checkpoint_restores_into_our_managers_with_a_plain_saver(tmp_path):
    path = str(tmp_path / "device")
    with tf.Graph().as_default():
        w, made = _ascend_stand_in(12345.0, 7, 1)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(w.assign([3.0, 4.0]))
            tf.compat.v1.train.Saver().save(sess, path)
    assert {name for name, _ in tf.train.list_variables(path)} >= {
        "loss_scale", "good_steps", "bad_steps"}
    with tf.Graph().as_default() as graph:
        w, x, _, mgr, opt, train = _ours()
        with tf.compat.v1.Session() as sess:
            tf.compat.v1.train.Saver().restore(sess, path)      # every variable, by name
            assert sess.run(mgr.variables) == [12345.0, 7, 1]
            value = sess.run("loss_scale:0")
            assert value == 12345.0 and value.dtype == np.float32
            np.testing.assert_array_equal(sess.run(w), [3.0, 4.0])
            # the restored counters count: bad_steps 1 + this overflow reaches 2 -> halve
            _, finite = sess.run([train, graph.get_tensor_by_name(
                "train/overflow_status_reduce_all:0")], {x: [np.inf, 1.0]})
            assert finite.dtype == np.bool_ and not finite
            assert sess.run(mgr.variables) == [6172.5, 0, 0]


def test_our_checkpoint_restores_into_a_script_that_expects_ascends_names(tmp_path):
    path = str(tmp_path / "ours")
    with tf.Graph().as_default():
        _, x, _, mgr, _, train = _ours()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train, {x: [np.inf, 1.0]})      # bad_steps 1
            sess.run(train)                          # good_steps 1
            expected = sess.run(mgr.variables)
            tf.compat.v1.train.Saver().save(sess, path)
    assert expected == [1024.0, 1, 1]
    with tf.Graph().as_default():
        w, made = _ascend_stand_in(0.0, 0, 0)
        with tf.compat.v1.Session() as sess:
            tf.compat.v1.train.Saver().restore(sess, path)   # every variable of the script
            assert sess.run(made) == expected
            assert sess.run("loss_scale:0") == 1024.0
            assert sess.run(w).shape == (2,)


def test_our_checkpoint_restores_into_ours_with_a_plain_saver(tmp_path):
    path = str(tmp_path / "ours")
    with tf.Graph().as_default():
        _, x, _, mgr, _, train = _ours()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train, {x: [np.inf, 1.0]})
            sess.run(train, {x: [np.inf, 1.0]})    # second overflow: halved
            expected = sess.run(mgr.variables + [tf.compat.v1.train.get_global_step()])
            tf.compat.v1.train.Saver().save(sess, path)
    assert expected == [512.0, 0, 0, 0]
    with tf.Graph().as_default():
        _, _, gs, mgr, _, _ = _ours(init_scale=2.0 ** 20)
        with tf.compat.v1.Session() as sess:
            tf.compat.v1.train.Saver().restore(sess, path)
            assert sess.run(mgr.variables + [gs]) == expected


@tf2_only
def test_object_based_checkpoint_round_trips_in_eager(tmp_path):
    mgr = nls.ExponentialUpdateLossScaleManager(2.0 ** 10, 1000, decr_every_n_nan_or_inf=1,
                                                decr_ratio=0.5)
    mgr.update_loss_scale(False)
    path = tf.train.Checkpoint(manager=mgr).save(str(tmp_path / "obj"))
    names = {name for name, _ in tf.train.list_variables(path)}
    assert {"manager/loss_scale/.ATTRIBUTES/VARIABLE_VALUE",
            "manager/good_steps/.ATTRIBUTES/VARIABLE_VALUE"} <= names
    other = nls.ExponentialUpdateLossScaleManager(2.0 ** 20, 1000)
    tf.train.Checkpoint(manager=other).restore(path).assert_existing_objects_matched()
    assert float(other.get_loss_scale().numpy()) == 512.0
