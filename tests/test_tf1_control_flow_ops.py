"""TF1 mode: ``tensorflow.python.ops.control_flow_ops`` keeps the TF 1.15 names TF 2.14 moved out
of it (``cond``, ``case``, ``while_loop``, ``Assert``), for user files and for tf-slim, whose
``utils.smart_cond`` (batch norm with a tensor ``is_training``) calls ``control_flow_ops.cond``;
``tensorflow.python.layers.normalization`` has ``tf.compat.v1.layers``' batch norm, which
tf-slim's ``batch_norm`` builds with the default ``updates_collections``."""
import json
import os
import subprocess
import sys

import pytest

_SCRIPT = """\
import json
import tensorflow as tf
from tensorflow.python.ops import control_flow_ops, array_ops
from tensorflow.python.ops.control_flow_ops import cond
import tensorflow.python.ops.control_flow_ops as cfo
flag = tf.placeholder(tf.bool, [])
x = tf.constant(3.0)
picked = control_flow_ops.cond(flag, lambda: x * 2.0, lambda: x)
i = cfo.while_loop(lambda i: i < 5, lambda i: i + 1, [tf.constant(0)])
check = control_flow_ops.Assert(x > 0.0, [x])
with tf.control_dependencies([check]):
    cased = control_flow_ops.case([(flag, lambda: x + 1.0)], default=lambda: x - 1.0)
with tf.Session() as sess:
    out = {"cond": [float(sess.run(picked, {flag: b})) for b in (True, False)],
           "while_loop": int(sess.run(i)),
           "case": [float(sess.run(cased, {flag: b})) for b in (True, False)],
           "same": [cond is tf.cond, cfo.cond is tf.cond, hasattr(array_ops, "zeros"),
                    control_flow_ops.group is tf.group]}
print(json.dumps(out))
control_flow_ops.not_a_name
"""

_SLIM_SCRIPT = """\
import json
import tensorflow as tf
import tensorflow.contrib.slim as slim
training = tf.placeholder(tf.bool, [])
images = tf.ones([2, 4, 4, 3])
net = slim.conv2d(images, 2, 3, normalizer_fn=slim.batch_norm,
                  normalizer_params={"is_training": training, "updates_collections": None})
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    print(json.dumps(list(sess.run(net, {training: True}).shape)))
"""


_SLIM_UPDATE_OPS_SCRIPT = """\
import json
import tensorflow as tf
import tensorflow.contrib.slim as slim
from tensorflow.python.layers import normalization
images = tf.ones([2, 4, 4, 3]) * tf.reshape(tf.range(3, dtype=tf.float32), [1, 1, 1, 3])
net = slim.batch_norm(images, is_training=True, decay=0.5)
updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
mean = [v for v in tf.global_variables() if "moving_mean" in v.name][0]
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run([net] + updates)
    print(json.dumps({"updates": len(updates), "moving_mean": sess.run(mean).tolist(),
                      "same": normalization.BatchNormalization is tf.layers.BatchNormalization}))
"""


def _emulate_tf1(tmp_path, name, text):
    script = tmp_path / name
    script.write_text(text)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--tf1", str(script)],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300, check=False)


def test_tf1_mode_gives_user_files_the_v1_control_flow_names_tf2_moved(tmp_path):
    result = _emulate_tf1(tmp_path, "uses_control_flow_ops.py", _SCRIPT)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stderr[-3000:]
    assert json.loads(lines[-1]) == {"cond": [6.0, 3.0], "while_loop": 5, "case": [4.0, 2.0],
                                     "same": [True, True, True, True]}
    assert result.returncode != 0  # a name TF 1.15 did not have either stays an AttributeError
    assert "module 'tensorflow.python.ops.control_flow_ops' has no attribute 'not_a_name'" \
        in result.stderr


@pytest.mark.slow
def test_tf1_contrib_slim_batch_norm_with_a_tensor_is_training(tmp_path):
    pytest.importorskip("tf_slim")
    result = _emulate_tf1(tmp_path, "slim_batch_norm.py", _SLIM_SCRIPT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [2, 4, 4, 2]


@pytest.mark.slow
def test_tf1_contrib_slim_batch_norm_with_update_ops_uses_the_v1_layers_batch_norm(tmp_path):
    pytest.importorskip("tf_slim")
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    result = _emulate_tf1(tmp_path, "slim_batch_norm_update_ops.py", _SLIM_UPDATE_OPS_SCRIPT)
    try:
        tf.compat.v1.layers.BatchNormalization  # pylint: disable=pointless-statement
    except AttributeError:  # Keras 3: TF1 layers need the tf_keras package, as TensorFlow says
        assert result.returncode != 0
        assert "No module named 'tf_keras'" in result.stderr, result.stderr[-3000:]
        return
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    # Where TensorFlow no longer has tensorflow.python.layers.normalization.BatchNormalization
    # (2.15 on), --tf1 gives the name back as tf.compat.v1.layers' class. TensorFlow 2.6 still has
    # its own, from its frozen Keras copy, a class apart from the keras package's
    # tf.compat.v1.layers.BatchNormalization there: --tf1 leaves TensorFlow's own names alone.
    try:
        from tensorflow.python.layers import normalization  # pylint: disable=import-outside-toplevel
        native = getattr(normalization, "BatchNormalization", None)
    except ImportError:   # 2.15 on: the module imports a Keras TensorFlow no longer has
        native = None
    same = True if native is None else native is tf.compat.v1.layers.BatchNormalization
    assert out == {"updates": 2, "moving_mean": [0.0, 0.5, 1.0], "same": same}
