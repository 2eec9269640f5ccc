"""A checkpoint holding a loss-scale state no rule can reach (NaN, inf, zero or below-minimum
scale, negative counters, a non-scalar scale) is refused at the first step after the restore,
with an error naming the variable, its value and what is accepted; nothing of that step is
applied. The Ascend managers and the Megatron scalers; a name-based Saver and
tf.train.Checkpoint.

Tampered checkpoints are written independently of the package: the original's tensors read with
tf.train.load_checkpoint, one replaced, all saved again from plain variables of the same names.
"""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from tf_versions import graph_session, initialise_variables, tf2_only

W0 = np.array([1.0, -2.0], np.float32)


def _exponential():
    return nls.ExponentialUpdateLossScaleManager(2.0 ** 10, incr_every_n_steps=100)


def _dynamic():
    return nls.DynamicGradScaler(2.0 ** 10, min_scale=4.0, growth_factor=2.0, backoff_factor=0.5,
                                 growth_interval=100, hysteresis=2)


def _constant():
    return nls.ConstantGradScaler(2.0 ** 10)


# (manager, checkpoint key, tampered value, text of the value in the message, accepted text)
CASES = [
    (_exponential, "loss_scale", np.float32(np.nan), "nan", ">= 1"),
    (_exponential, "loss_scale", np.float32(np.inf), "inf", ">= 1"),
    (_exponential, "loss_scale", np.float32(0.0), "0", ">= 1"),
    (_exponential, "loss_scale", np.float32(0.5), "0.5", ">= 1"),
    (_exponential, "loss_scale", np.float32([1024.0, 2048.0]), "1024 2048", "a scalar"),
    (_exponential, "good_steps", np.int32(-1), "-1", ">= 0"),
    (_exponential, "bad_steps", np.int32(-7), "-7", ">= 0"),
    (_dynamic, "scale", np.float32(np.nan), "nan", "min_scale"),
    (_dynamic, "scale", np.float32(2.0), "2", ">= min_scale (4.0)"),
    (_dynamic, "scale", np.float32(0.0), "0", ">= min_scale (4.0)"),
    (_dynamic, "growth_tracker", np.int32(-3), "-3", ">= 0"),
    (_dynamic, "min_scale_overflow_steps", np.int32(-1), "-1", ">= 0"),
    (_constant, "scale", np.float32(-np.inf), "-inf", "> 0"),
    (_constant, "scale", np.float32(0.0), "0", "> 0"),
]


def _build(make_manager):
    w = tf.compat.v1.get_variable("w", initializer=W0)
    manager = make_manager()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), manager)
    train = opt.minimize(tf.reduce_sum(w * w))
    return w, manager, train


def _tamper(path, key, value, out):
    """A copy of checkpoint ``path`` with ``key`` holding ``value``, written by a plain Saver."""
    reader = tf.train.load_checkpoint(path)
    keys = sorted(reader.get_variable_to_shape_map())
    assert key in keys, keys
    with tf.Graph().as_default():
        named = {k: tf.Variable(value if k == key else reader.get_tensor(k), name="v%d" % i)
                 for i, k in enumerate(keys)}
        saver = tf.compat.v1.train.Saver(named)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return saver.save(sess, out)


@pytest.mark.parametrize("make_manager,key,value,shown,accepted", CASES)
def test_a_saver_restore_of_an_impossible_state_is_refused_at_the_first_step(
        make_manager, key, value, shown, accepted, tmp_path):
    with tf.Graph().as_default():
        _, _, train = _build(make_manager)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            good = saver.save(sess, str(tmp_path / "good"))
    bad = _tamper(good, key, value, str(tmp_path / "bad"))
    with tf.Graph().as_default():
        w, manager, train = _build(make_manager)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            saver.restore(sess, good)              # the untampered one trains
            sess.run(train)
            saver.restore(sess, bad)
            restored_w = sess.run(w)
            others = [v for v in manager.variables if v.op.name != key + "_value"]
            restored_others = sess.run(others)
            with pytest.raises(tf.errors.InvalidArgumentError) as caught:
                sess.run(train)
            message = caught.value.message
            assert "%s: its variable %s holds" % (type(manager).__name__, key) in message
            assert "[%s]" % shown in message, message
            assert "accepted: a scalar, " in message and accepted in message, message
            # nothing of the step was applied
            np.testing.assert_array_equal(sess.run(w), restored_w)
            for got, want in zip(sess.run(others), restored_others):
                np.testing.assert_array_equal(got, want)


@tf2_only
@pytest.mark.parametrize("make_manager,key,value,shown,accepted",
                         [c for c in CASES if np.ndim(c[2]) == 0])
def test_a_tf_train_checkpoint_restore_of_an_impossible_state_is_refused(
        make_manager, key, value, shown, accepted, tmp_path):
    """Eager: the tampered state is written by a twin object whose variable was assigned
    directly (what the constructors and load_state_dict refuse)."""
    twin = make_manager()
    twin_var = twin._state()["_weights"][key]  # pylint: disable=protected-access
    twin_var.assign(value)
    path = tf.train.Checkpoint(manager=twin).write(str(tmp_path / "bad"))

    manager = make_manager()
    w = tf.Variable(W0)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), manager)
    tf.train.Checkpoint(manager=manager).read(path).assert_consumed()

    @tf.function
    def step():
        opt.minimize(lambda: tf.reduce_sum(w * w), var_list=[w])

    with pytest.raises(tf.errors.InvalidArgumentError, match="its variable %s holds" % key):
        step()
    with pytest.raises(tf.errors.InvalidArgumentError, match=accepted.replace("(", r"\(")
                       .replace(")", r"\)")):
        manager.get_loss_scale()                  # eager reads are refused too
    np.testing.assert_array_equal(w.numpy(), W0)


def test_load_state_dict_refuses_a_scale_below_min_scale():
    with graph_session():
        scaler = _dynamic()
        initialise_variables()
        with pytest.raises(ValueError, match=r"state_dict\['scale'\] must be a finite number >= "
                                             r"min_scale \(4.0\) and <= 3.4028235e38 .*got 2.0"):
            scaler.load_state_dict({"scale": 2.0, "growth_tracker": 0, "hysteresis_tracker": 2})
        assert scaler.state_dict()["scale"] == 1024.0


def test_a_valid_restored_state_trains_and_the_check_costs_no_variable(tmp_path):
    with tf.Graph().as_default():
        w, manager, train = _build(_dynamic)
        n_vars = len(tf.compat.v1.global_variables())
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                sess.run(train)
            assert sess.run(manager.get_loss_scale()) == 1024.0
        assert len(tf.compat.v1.global_variables()) == n_vars
    np.testing.assert_array_equal(W0.shape, (2,))


# (manager, checkpoint keys of its state)
STATE_KEYS = [(_exponential, ["loss_scale", "good_steps", "bad_steps"]),
              (_dynamic, ["scale", "growth_tracker", "hysteresis_tracker",
                          "min_scale_overflow_steps"])]


@pytest.mark.parametrize("make_manager,key", [(m, k) for m, keys in STATE_KEYS for k in keys])
def test_a_saver_restore_of_a_wrong_dtype_changes_nothing(make_manager, key, tmp_path):
    """A name-based Saver reads every tensor in one op before it assigns any: a value of
    another dtype fails that read (naming the key), and nothing is assigned."""
    with tf.Graph().as_default():
        _, manager, train = _build(make_manager)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            good = saver.save(sess, str(tmp_path / "good"))
    value = tf.train.load_checkpoint(good).get_tensor(key)
    other = value.astype(np.float64 if value.dtype.kind == "i" else np.int64)
    bad = _tamper(good, key, other, str(tmp_path / "bad"))
    with tf.Graph().as_default():
        w, manager, _ = _build(make_manager)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            before = sess.run([w] + manager.variables)
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"%s.*dtype" % key):
                saver.restore(sess, bad)
            for got, want in zip(sess.run([w] + manager.variables), before):
                np.testing.assert_array_equal(got, want)
