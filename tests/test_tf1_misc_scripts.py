"""TF1-mode and shim pieces met by the audio/vision scripts of the misc sample (own test shapes)."""
import numpy as np
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
    from npu_loss_scale.ascend import precision  # pylint: disable=import-outside-toplevel
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
