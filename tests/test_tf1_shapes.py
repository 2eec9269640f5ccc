"""Shapes of TF1 code that a port to TensorFlow 1.15 trips on, and the TF1 adapter's surface.

* A manager built inside ``tf.control_dependencies(UPDATE_OPS)`` (batch-norm scripts): its
  initial values must not depend on the forward pass, or ``global_variables_initializer()``
  needs a feed.
* TF1 Keras initialises only the variables it tracks plus ``optimizer.variables()``: the
  manager's ``loss_scale``, ``good_steps`` and ``bad_steps`` must be among them.
* The class the optimizer subclasses (contrib's ``LossScaleOptimizer`` on 1.15, TensorFlow's
  ``MixedPrecisionLossScaleOptimizer`` on 2.x) and the attributes Ascend's TF1 optimizer keeps.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from tf_versions import BASE_OPTIMIZER, TF1


def test_a_manager_built_under_update_ops_dependencies_initialises_without_a_feed(graph):
    x = tf.compat.v1.placeholder(tf.float32, [None, 2])
    w = tf.compat.v1.get_variable("w", initializer=[[1.0], [1.0]])
    moving = tf.compat.v1.get_variable("moving_mean", initializer=0.0, trainable=False)
    h = tf.matmul(x, w)
    # what a batch-norm layer adds: an update op that needs the forward pass (the feed)
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS,
                                   moving.assign(0.9 * moving + 0.1 * tf.reduce_mean(h)))
    with tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
        mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 10, incr_every_n_steps=2)
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), mgr)
        train = opt.minimize(tf.reduce_sum(h))
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())    # no feed: must not fail
        assert sess.run("loss_scale:0") == 1024.0
        for _ in range(2):
            sess.run(train, {x: [[1.0, 2.0]]})
        assert sess.run("loss_scale:0") == 2048.0               # grew after 2 finite steps
        np.testing.assert_allclose(sess.run(w), [[0.0], [-1.0]])  # 1 - 2 * 0.5 * [1, 2]
        assert sess.run(moving) != 0.0                          # the update ops ran too


def test_the_managers_variables_are_among_the_optimizers(graph):
    w = tf.compat.v1.get_variable("w", initializer=1.0)
    mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=8, incr_every_n_steps=2)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(0.1), mgr)
    opt.minimize(w * 2.0)
    names = {v.op.name for v in opt.variables()}
    assert {"loss_scale_value", "good_steps_value", "bad_steps_value"} <= names
    assert all(v in opt.variables() for v in mgr.variables)


_KERAS_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    import npu_loss_scale as nls
    tf.compat.v1.disable_eager_execution()
    mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 10, incr_every_n_steps=3)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01), mgr)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    model.compile(optimizer=opt, loss="mse")
    x = np.ones((8, 3), np.float32)
    model.fit(x, np.zeros((8, 1), np.float32), batch_size=4, epochs=2, verbose=0)
    session = tf.compat.v1.keras.backend.get_session()
    print("scale", session.run(mgr.get_loss_scale()))
""")


def test_tf1_keras_fit_initialises_the_managers_variables():
    if not hasattr(tf.compat.v1.keras.backend, "get_session"):
        pytest.skip("Keras 3 (TF 2.16+) has no TF1 Keras session to train a v1 optimizer in")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NPU_LOSS_SCALE_BACKEND="emulation")
    result = subprocess.run([sys.executable, "-c", _KERAS_SCRIPT], capture_output=True,
                            text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # 4 finite steps (2 epochs x 2 batches) with growth every 3: 1024 -> 2048
    assert "scale 2048.0" in result.stdout


def test_the_optimizer_subclasses_the_class_ascends_tf1_adapter_subclasses(graph):
    mgr = nls.FixedLossScaleManager(16)
    inner = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    opt = nls.NPULossScaleOptimizer(inner, mgr)
    assert isinstance(opt, BASE_OPTIMIZER)
    if TF1:
        from tensorflow.contrib.mixed_precision import (  # pylint: disable=import-error,import-outside-toplevel
            LossScaleOptimizer)
        assert isinstance(opt, LossScaleOptimizer)
        assert opt._opt is inner  # pylint: disable=protected-access
    # the attribute Ascend's TF1 optimizer keeps its manager in
    assert opt._loss_scale_manager is mgr  # pylint: disable=protected-access


def test_saturate_every_op_saturates_and_keeps_the_gradients(graph, session):
    # TensorFlow 1.15 writes an op callback's replacement into the op's own outputs; before the
    # package wrote the op's own output back, tf.gradients walked past the saturation and gave
    # None (and saturate_every_op was refused there).
    x = tf.constant([300.0, 3.0], tf.float16)
    dy = tf.constant([1.0, 1.0], tf.float16)
    with nls.saturation.saturate_every_op():
        y = x * x                                  # 90000 saturates to 65504
        inside = tf.gradients(y, x, grad_ys=dy)[0]
    outside = tf.gradients(y, x)[0]
    mul = [op for op in graph.get_operations() if op.type == "Mul"][0]
    assert mul.outputs[0].op is mul and y.op is not mul
    assert inside is not None and outside is not None
    got_y, got_inside, got_outside = session.run([y, inside, outside])
    np.testing.assert_array_equal(got_y, [65504.0, 9.0])
    np.testing.assert_array_equal(got_inside, [600.0, 6.0])      # d(x*x)/dx = 2x
    np.testing.assert_array_equal(got_outside, [600.0, 6.0])


def test_an_estimator_trains_through_the_optimizer_and_saves_ascends_names(tmp_path):
    estimator = getattr(tf.compat.v1, "estimator", None)
    if estimator is None:
        pytest.skip("tensorflow-estimator is not available for this TensorFlow (2.16+)")

    def model_fn(features, labels, mode):
        w = tf.compat.v1.get_variable("w", initializer=[[0.5], [0.5]])
        loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - labels))
        mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=16, incr_every_n_steps=2)
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), mgr)
        train = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
        return estimator.EstimatorSpec(mode, loss=loss, train_op=train)

    def input_fn():
        x = np.ones((4, 2), np.float32)
        return tf.compat.v1.data.Dataset.from_tensor_slices((x, np.zeros((4, 1), np.float32))) \
            .batch(1)

    est = estimator.Estimator(model_fn, model_dir=str(tmp_path))
    est.train(input_fn, steps=4)
    saved = dict(tf.train.list_variables(str(tmp_path)))
    assert {"loss_scale", "good_steps", "bad_steps", "global_step"} <= set(saved)
    reader = tf.compat.v1.train.NewCheckpointReader(tf.train.latest_checkpoint(str(tmp_path)))
    assert reader.get_tensor("global_step") == 4
    assert reader.get_tensor("loss_scale") == 64.0     # 4 finite steps, growth every 2: 16 * 2 * 2


_TF1_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    from npu_bridge.npu_init import *
    from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
    from npu_bridge.estimator.npu.npu_loss_scale_manager import ExponentialUpdateLossScaleManager

    x = tf.placeholder(tf.float32, [None, 4])
    w = tf.get_variable("w", initializer=tf.ones([4, 1]))   # (tf.layers is gone with Keras 3)
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
    mgr = ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 10, incr_every_n_steps=2,
                                            decr_every_n_nan_or_inf=1)
    opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.01), mgr)
    gs = tf.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=gs)
    with tf.Session(config=npu_config_proto()) as sess:
        sess.run(tf.global_variables_initializer())
        for value in [1.0, 1.0, np.inf, 1.0]:
            sess.run(train, {x: np.full((2, 4), value, np.float32)})
        print("RESULT", sess.run(gs), sess.run("loss_scale:0"))
""")


@pytest.mark.slow
@pytest.mark.parametrize("tf1_flag", [False, True], ids=["plain", "tf1_flag"])
def test_the_emulate_entry_point_runs_a_tf1_script(tmp_path, tf1_flag):
    if not TF1 and not tf1_flag:
        tf1_flag = True     # on TensorFlow 2 a TF1 script needs the TF1 mode
    script = tmp_path / "train.py"
    script.write_text(_TF1_SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NPU_LOSS_SCALE_FUSED_UNSCALE="off")
    env.pop("NPU_LOSS_SCALE_BACKEND", None)
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate"]
                            + (["--tf1"] if tf1_flag else []) + [str(script)],
                            capture_output=True, text=True, env=env, cwd=str(tmp_path),
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # two finite steps grow 1024 -> 2048, the inf step shrinks it (x0.8) and is skipped
    assert "RESULT 3 1638.4" in result.stdout
    if TF1 and tf1_flag:
        assert "--tf1 changes nothing on TensorFlow 1.15" in result.stderr
