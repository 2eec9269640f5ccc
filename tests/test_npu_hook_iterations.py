"""``npu_bridge.estimator.npu.npu_hook.SetIterationsVarHook``: iterations_per_loop for a
training loop the script drives itself (a plain Estimator, a MonitoredTrainingSession)."""
import numpy as np
import pytest
import tensorflow as tf


@pytest.fixture
def npu_hook(npu_shim):  # pylint: disable=unused-argument
    from npu_bridge.estimator.npu import (  # pylint: disable=import-outside-toplevel
        npu_hook as module)
    yield module


class _Calls(tf.compat.v1.train.SessionRunHook):
    def __init__(self):
        self.calls = 0

    def after_run(self, run_context, run_values):
        self.calls += 1


def test_monitored_session_runs_the_train_op_n_times_per_run(npu_hook):
    with tf.Graph().as_default():
        counter = tf.compat.v1.get_variable("counter", initializer=0, use_resource=True)
        step = counter.assign_add(1).op
        value = counter.read_value()
        calls = _Calls()
        with tf.compat.v1.train.MonitoredSession(
                hooks=[npu_hook.SetIterationsVarHook(3), calls]) as sess:
            sess.run(step)
            sess.run([step, value])
            assert sess.run(value) == 6   # a read is not a training step
        assert calls.calls == 3


def test_one_iteration_is_one_step_and_the_count_is_checked(npu_hook):
    with tf.Graph().as_default():
        counter = tf.compat.v1.get_variable("counter", initializer=0, use_resource=True)
        step = counter.assign_add(1).op
        value = counter.read_value()
        with tf.compat.v1.train.MonitoredSession(
                hooks=[npu_hook.SetIterationsVarHook(1)]) as sess:
            sess.run(step)
            assert sess.run(value) == 1
    with pytest.raises(ValueError, match="iterations_per_loop must be positive; got 0"):
        npu_hook.SetIterationsVarHook(0)


def test_plain_estimator_with_the_hook_trains_n_steps_per_session_run(npu_hook, tmp_path):
    if not hasattr(tf.compat.v1, "estimator") or not hasattr(tf.compat.v1.estimator,
                                                             "Estimator"):
        pytest.skip("TensorFlow's estimator is absent (removed after 2.15)")
    lib = tf.compat.v1.estimator

    def model_fn(features, labels, mode):
        w = tf.compat.v1.get_variable("w", initializer=1.0)
        loss = tf.reduce_mean(tf.square(w * features - labels))
        step = tf.compat.v1.train.get_global_step()
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, step)
        return lib.EstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn():
        data = tf.data.Dataset.from_tensor_slices((np.ones(8, np.float32),
                                                   np.full(8, 2.0, np.float32)))
        return data.repeat().batch(2)

    calls = _Calls()
    estimator = lib.Estimator(model_fn, model_dir=str(tmp_path / "model"))
    estimator.train(input_fn, max_steps=6, hooks=[npu_hook.SetIterationsVarHook(2), calls])
    assert estimator.get_variable_value("global_step") == 6 and calls.calls == 3
