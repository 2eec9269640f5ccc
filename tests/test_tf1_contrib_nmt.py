"""TF1 mode's contrib pieces NMT scripts (GNMT-style: their own attention wrapper and beam search
decoder; noahnmt's trainer) import or call: module imports at the top (compiler.xla, cudnn_rnn
constants, framework's tensor_util, all_reduce), seq2seq's Decoder/tile_batch/hardmax,
learn.ModeKeys, learn.monitors.replace_monitors_with_hooks, eager.in_eager_mode,
util.constant_value, framework.nest.is_sequence; and NPUDistributedOptimizer around an optimizer
that never calls Optimizer.__init__ (tensor2tensor's ConditionalOptimizer shape)."""
import json
import os
import subprocess
import sys

import pytest

from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation

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
hook = tf.train.StepCounterHook(every_n_steps=1)
out["hooks_kept"] = tf.contrib.learn.monitors.replace_monitors_with_hooks([hook], None) == [hook]
try:
    tf.contrib.learn.monitors.replace_monitors_with_hooks([object()], None)
except TypeError:
    out["monitor_refused"] = True
out["in_eager_mode"] = tf.contrib.eager.in_eager_mode()
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


def _run(tmp_path, name, text, *extra):
    script = tmp_path / name
    script.write_text(text)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO, RANK_SIZE="1")
    env.pop(detection.ENV_VAR, None)
    env.pop(emulation.MODE_ENV_VAR, None)
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate"] + list(extra)
                            + ["--tf1", str(script)], env=env, cwd=str(tmp_path),
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads([l for l in result.stdout.splitlines() if l.startswith("{")][-1])


def test_tf1_contrib_pieces_of_nmt_scripts(tmp_path):
    out = _run(tmp_path, "nmt_pieces.py", _SCRIPT)
    not_mapped = " is not mapped to TensorFlow 2 by the TF1 mode of npu_loss_scale.emulate"
    assert out == {
        "abstract": True, "decoder": [2, False], "tiled_shape": [6, 2],
        "tiled": [10.0, 10.0, 10.0, 30.0, 30.0, 30.0], "is_sequence": [True, False],
        "hardmax": [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], "shape_mismatch": True,
        "same": [[5.0, 6.0], [7.0, 8.0]], "checked": [[1.0, 1.0], [2.0, 2.0]],
        "runtime_mismatch": True, "checked_shape": [2, 2],
        "modes": ["train", "eval", "infer"], "hooks_kept": True, "monitor_refused": True,
        "in_eager_mode": False, "constant_value": 7, "xla_compile": True,
        "cudnn": ["unidirectional", "bidirectional"],
        "all_reduce": "tensorflow.contrib.all_reduce.python.all_reduce.build_ring_all_reduce"
                      + not_mapped,
        "cudnn_lstm": "tf.contrib.cudnn_rnn.CudnnLSTM" + not_mapped,
        "dynamic_decode": "tf.contrib.seq2seq.dynamic_decode" + not_mapped}


_OPTIMIZER_SCRIPT = r'''
from npu_bridge.npu_init import *
import json
import tensorflow as tf


class ConditionalOptimizer(tf.train.Optimizer):
    """Chooses its inner optimizer by name and, like tensor2tensor's, skips Optimizer.__init__."""

    def __init__(self, learning_rate):
        self._opt = tf.train.GradientDescentOptimizer(learning_rate)

    def compute_gradients(self, loss, var_list=None, **kwargs):
        return self._opt.compute_gradients(loss, var_list, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._opt.apply_gradients(grads_and_vars, global_step=global_step, name=name)


w = tf.get_variable("w", [], initializer=tf.constant_initializer(1.0))
x = tf.placeholder(tf.float32, [])
opt = NPUDistributedOptimizer(ConditionalOptimizer(0.5))
name = opt.get_name()
opt = NPULossScaleOptimizer(opt, FixedLossScaleManager(2 ** 10))
grads = opt.compute_gradients(w * x)
train = opt.apply_gradients(grads, global_step=tf.train.get_or_create_global_step())
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for feed in (1.0, 1e38, 2.0):
        sess.run(train, {x: feed})
    print(json.dumps({"name": name, "w": float(sess.run(w))}))
'''


@pytest.mark.slow
def test_npu_distributed_optimizer_wraps_an_optimizer_that_skips_optimizer_init(tmp_path):
    """The adapter names the wrapper "Distributed" + the wrapped class's name, so an optimizer
    with no ``_name`` wraps; the overflowing step (1e38 * 2**10) is skipped, the others apply."""
    report = tmp_path / "report.json"
    out = _run(tmp_path, "conditional_optimizer.py", _OPTIMIZER_SCRIPT, "--report", str(report))
    assert out == {"name": "DistributedConditionalOptimizer", "w": 1.0 - 0.5 * 1.0 - 0.5 * 2.0}
    counts = json.loads(report.read_text())
    assert (counts["steps_applied"], counts["steps_skipped"]) == (2, 1)
