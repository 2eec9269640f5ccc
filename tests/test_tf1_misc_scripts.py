"""TF1-mode and shim pieces met by the audio/vision scripts of the misc sample (own test shapes)."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf


def test_tf1_contrib_nn_conv1d_transpose_upsamples_with_strides(graph, session):
    """A conditioning upsampler: ``tf.contrib.nn.conv1d_transpose(x, w, shape, strides=k)``,
    TF 1.15's contrib re-export of the core op (``strides``, NWC, filter [width, out, in])."""
    from npu_loss_scale.ascend.tf1_contrib import contrib  # pylint: disable=import-outside-toplevel
    c = contrib()
    x = tf.constant(np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4))
    w = tf.ones([8, 5, 4])
    n, t = tf.shape(x)[0], tf.shape(x)[1]
    up = c.nn.conv1d_transpose(x, w, [n, t * 4, 5], strides=4)
    ref = tf.nn.conv1d_transpose(x, w, [2, 12, 5], strides=4)
    got, want = session.run([up, ref])
    assert got.shape == (2, 12, 5)
    np.testing.assert_allclose(got, want)


def test_precision_mode_rewrite_lists_the_graph_a_fixed_number_of_times(graph, monkeypatch):
    """A flow model's graph has thousands of cube ops among tens of thousands: the rewrite must
    not list every op of the graph once per rewritten op (quadratic: WaveGlow's first
    ``session.run`` took more than 5 minutes). The ops it adds are still never rewritten again."""
    from npu_loss_scale.device import precision  # pylint: disable=import-outside-toplevel
    x = tf.compat.v1.placeholder(tf.float32, [2, 4])
    w = tf.ones([4, 4])
    for _ in range(30):
        x = tf.nn.relu(tf.matmul(x, w) + 1.0)
    listed = []
    original = type(graph).get_operations

    def counting(self):
        listed.append(1)
        return original(self)
    monkeypatch.setattr(type(graph), "get_operations", counting)
    assert precision.apply_precision_mode(graph, "force_fp16") == 30 * 3
    assert len(listed) <= 2
    monkeypatch.undo()
    ops = len(graph.get_operations())
    assert precision.apply_precision_mode(graph, "force_fp16") == 0
    assert len(graph.get_operations()) == ops


_SLIM_BATCH_NORM_SCRIPT = """
import json
import numpy as np
import tensorflow as tf
import tensorflow.contrib.slim as slim

x = tf.placeholder(tf.float32, [2, 8, 8, 3])
with slim.arg_scope([slim.conv2d], normalizer_fn=slim.batch_norm,
                    normalizer_params={"is_training": True}):
    y = slim.conv2d(x, 4, 3)
loss = tf.reduce_mean(tf.square(y))
updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
with tf.control_dependencies(updates):
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    mean = [v for v in tf.global_variables() if "moving_mean" in v.name][0]
    sess.run(train, {x: np.random.RandomState(0).rand(2, 8, 8, 3)})
    print(json.dumps({"vars": sorted(v.name for v in tf.global_variables()),
                      "updates": len(updates),
                      "moved": float(np.abs(sess.run(mean)).sum())}))
"""


def _keras_2_layers():
    try:
        return hasattr(tf.compat.v1.layers, "BatchNormalization")
    except (AttributeError, ImportError):
        return False


@pytest.mark.slow
def test_tf1_slim_batch_norm_builds_tf1_batch_normalization_layer(tmp_path):
    """``slim.conv2d(..., normalizer_fn=slim.batch_norm)`` with the default update collection
    builds ``tensorflow.python.layers.normalization.BatchNormalization``, which TF 2.x looks for
    in ``tf_keras.legacy_tf_layers`` (absent from every tf_keras): TF1 mode gives Keras 2's TF1
    layer; with Keras 3 and no tf_keras, an error naming the layer."""
    pytest.importorskip("tf_slim")
    script = tmp_path / "slim_bn.py"
    script.write_text(_SLIM_BATCH_NORM_SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--tf1",
                             str(script)], env=env, cwd=str(tmp_path), capture_output=True,
                            text=True, timeout=300, check=False)
    if not _keras_2_layers() and importlib.util.find_spec("tf_keras") is None:
        assert result.returncode != 0
        assert "tensorflow.python.layers.normalization.BatchNormalization" in result.stderr
        assert "is not emulated" in result.stderr
        return
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert "Conv/BatchNorm/moving_mean:0" in out["vars"] and "Conv/BatchNorm/beta:0" in out["vars"]
    assert out["updates"] == 2
    assert out["moved"] > 0


def test_tf1_contrib_image_rotate_translate_transform_as_augmentations_use_them(graph, session):
    """RandAugment-style ops: ``from tensorflow.contrib import image as image_ops`` then
    ``image_ops.rotate(img, radians)``, ``translate(img, [dx, dy])``, ``transform(img, t)`` on
    HWC uint8 images, zero fill outside."""
    from npu_loss_scale.ascend.tf1_contrib import contrib  # pylint: disable=import-outside-toplevel
    image_ops = contrib().image
    img = tf.constant(np.arange(1, 10, dtype=np.uint8).reshape(3, 3, 1))
    rotated = image_ops.rotate(img, np.pi / 2)
    right = image_ops.translate(img, [1, 0])
    down = image_ops.translate(tf.cast(img, tf.float32)[None], [[0, 1]])
    same = image_ops.transform(img, [1, 0, 0, 0, 1, 0, 0, 0])
    sheared = image_ops.transform(img, tf.constant([1, 1, 0, 0, 1, 0, 0, 0], tf.float32))
    gray = image_ops.rotate(tf.ones([4, 4]), 0.0)
    got = session.run([rotated, right, down, same, sheared, gray])
    assert got[0][:, :, 0].tolist() == [[3, 6, 9], [2, 5, 8], [1, 4, 7]]   # counter-clockwise
    assert got[1][:, :, 0].tolist() == [[0, 1, 2], [0, 4, 5], [0, 7, 8]]
    assert got[2][0, :, :, 0].tolist() == [[0, 0, 0], [1, 2, 3], [4, 5, 6]]
    assert got[3][:, :, 0].tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert got[4][:, :, 0].tolist() == [[1, 2, 3], [5, 6, 0], [9, 0, 0]]  # x_in = x + y
    assert got[0].dtype == np.uint8 and got[5].shape == (4, 4) and got[5].min() == 1.0


def test_tf1_contrib_distributions_percentile_per_image_as_a_mask_threshold(graph, session):
    """``tf.contrib.distributions.percentile(err, q=99, axis=[1, 2])`` per image of an NHWC
    batch: TF 1.15's sampled percentile (nearest by default, lower/higher, keep_dims)."""
    from npu_loss_scale.ascend.tf1_contrib import contrib  # pylint: disable=import-outside-toplevel
    dist = contrib().distributions
    values = np.random.RandomState(0).rand(2, 5, 4, 1).astype(np.float32)
    x = tf.constant(values)
    got = session.run([dist.percentile(x, q=99, axis=[1, 2]),
                       dist.percentile(x, q=50, axis=[1, 2], interpolation="lower"),
                       dist.percentile(x, q=50, axis=[1, 2], interpolation="higher"),
                       dist.percentile(x, 30.0),
                       dist.percentile(x, q=50, axis=[1, 2], keep_dims=True)])
    flat = np.sort(values.reshape(2, 20, 1).transpose(0, 2, 1), axis=-1)   # [2, 1, 20] ascending
    np.testing.assert_allclose(got[0], flat[:, :, 19])     # 19 * 0.99 rounds to the largest
    np.testing.assert_allclose(got[1], flat[:, :, 9])      # 19 * 0.5 = 9.5: lower, higher
    np.testing.assert_allclose(got[2], flat[:, :, 10])
    np.testing.assert_allclose(got[3], np.sort(values.ravel())[12])   # 39 * 0.3 = 11.7 -> 12
    assert got[4].shape == (2, 1, 1, 1)
    grad = tf.gradients(dist.percentile(x, q=99, axis=[1, 2]), x)[0]
    assert session.run(tf.reduce_sum(grad)) == 2.0
