"""TF1 mode's contrib pieces NMT scripts (GNMT-style: their own attention wrapper and beam search
decoder) import or call: module imports at the top (compiler.xla, cudnn_rnn constants,
framework's tensor_util, all_reduce), seq2seq's Decoder/tile_batch/hardmax, learn.ModeKeys,
util.constant_value, framework.nest.is_sequence."""
import json
import os
import subprocess
import sys

from npu_loss_scale import detection, emulation

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

_SCRIPT = r'''
import collections
import json
import tensorflow as tf
from tensorflow.contrib.compiler import xla
from tensorflow.contrib.cudnn_rnn.python.layers import cudnn_rnn
from tensorflow.contrib.framework.python.framework import tensor_util
from tensorflow.contrib.all_reduce.python import all_reduce


class GreedyDecoder(tf.contrib.seq2seq.Decoder):
    def __init__(self, batch):
        self._batch = batch

    @property
    def batch_size(self):
        return self._batch

    @property
    def output_size(self):
        return tf.TensorShape([])

    @property
    def output_dtype(self):
        return tf.int32

    def initialize(self, name=None):
        return tf.zeros([self._batch], tf.bool), tf.zeros([self._batch]), ()

    def step(self, time, inputs, state, name=None):
        return inputs, state, inputs, tf.ones([self._batch], tf.bool)


out = {}
try:
    class Incomplete(tf.contrib.seq2seq.Decoder):
        pass
    Incomplete()
except TypeError:
    out["abstract"] = True
decoder = GreedyDecoder(2)
out["decoder"] = [decoder.batch_size, decoder.tracks_own_finished]
memory = tf.constant([[1.0, 2.0], [3.0, 4.0]])
state = collections.namedtuple("LSTMStateTuple", "c h")(c=memory, h=memory * 10)
tiled = tf.contrib.seq2seq.tile_batch(state, multiplier=3)
out["tiled_shape"] = tiled.c.shape.as_list()
out["is_sequence"] = [tf.contrib.framework.nest.is_sequence(state),
                      tf.contrib.framework.nest.is_sequence(memory)]
same = tensor_util.with_same_shape(memory, tf.constant([[5.0, 6.0], [7.0, 8.0]]))
unknown = tf.placeholder(tf.float32, [None, 2])
checked = tensor_util.with_same_shape(memory, unknown)
try:
    tensor_util.with_same_shape(memory, tf.zeros([3, 2]))
except ValueError:
    out["shape_mismatch"] = True
with tf.Session() as sess:
    out["tiled"] = sess.run(tiled.h)[:, 0].tolist()
    out["hardmax"] = sess.run(tf.contrib.seq2seq.hardmax(
        tf.constant([[0.1, 0.7, 0.2], [0.9, 0.0, 0.1]]))).tolist()
    out["same"] = sess.run(same).tolist()
    out["checked"] = sess.run(checked, {unknown: [[1.0, 1.0], [2.0, 2.0]]}).tolist()
    try:
        sess.run(checked, {unknown: [[1.0, 1.0]]})
    except tf.errors.InvalidArgumentError:
        out["runtime_mismatch"] = True
out["checked_shape"] = checked.shape.as_list()
out["modes"] = [tf.contrib.learn.ModeKeys.TRAIN, tf.contrib.learn.ModeKeys.EVAL,
                tf.contrib.learn.ModeKeys.INFER]
out["constant_value"] = int(tf.contrib.util.constant_value(tf.constant(7)))
out["xla_compile"] = callable(xla.compile)
out["cudnn"] = [cudnn_rnn.CUDNN_RNN_UNIDIRECTION, cudnn_rnn.CUDNN_RNN_BIDIRECTION]
for name, get in (("all_reduce", lambda: all_reduce.build_ring_all_reduce),
                  ("cudnn_lstm", lambda: tf.contrib.cudnn_rnn.CudnnLSTM),
                  ("dynamic_decode", lambda: tf.contrib.seq2seq.dynamic_decode)):
    try:
        get()
    except AttributeError as err:
        out[name] = str(err)
print(json.dumps(out))
'''


def test_tf1_contrib_pieces_of_nmt_scripts(tmp_path):
    script = tmp_path / "nmt_pieces.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    env.pop(detection.ENV_VAR, None)
    env.pop(emulation.MODE_ENV_VAR, None)
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--tf1",
                             str(script)], env=env, cwd=str(tmp_path), capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads([l for l in result.stdout.splitlines() if l.startswith("{")][-1])
    not_mapped = " is not mapped to TensorFlow 2 by the TF1 mode of npu_loss_scale.emulate"
    assert out == {
        "abstract": True, "decoder": [2, False], "tiled_shape": [6, 2],
        "tiled": [10.0, 10.0, 10.0, 30.0, 30.0, 30.0], "is_sequence": [True, False],
        "hardmax": [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], "shape_mismatch": True,
        "same": [[5.0, 6.0], [7.0, 8.0]], "checked": [[1.0, 1.0], [2.0, 2.0]],
        "runtime_mismatch": True, "checked_shape": [2, 2],
        "modes": ["train", "eval", "infer"], "constant_value": 7, "xla_compile": True,
        "cudnn": ["unidirectional", "bidirectional"],
        "all_reduce": "tensorflow.contrib.all_reduce.python.all_reduce.build_ring_all_reduce"
                      + not_mapped,
        "cudnn_lstm": "tf.contrib.cudnn_rnn.CudnnLSTM" + not_mapped,
        "dynamic_decode": "tf.contrib.seq2seq.dynamic_decode" + not_mapped}
