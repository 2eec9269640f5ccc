"""A TF1 Session script in the shape of Ascend's ModelZoo ones (written for the tests): contrib
module paths, the adapter's old tensorflow.contrib.offline_train location, tensorflow_core, and
tf.contrib.training.HParams; one JSON line of what it found, then one per step."""
import json

import numpy as np
import tensorflow as tf
import tensorflow.contrib.slim as slim
import tensorflow_core
from tensorflow.contrib import rnn
from tensorflow.contrib.framework.python.ops import add_arg_scope
from tensorflow.contrib.layers.python.layers import utils
from tensorflow.contrib.offline_train.python.npu.npu_loss_scale_manager import \
    FixedLossScaleManager
from tensorflow.contrib.offline_train.python.npu.npu_loss_scale_optimizer import \
    NPULossScaleOptimizer
from tensorflow.contrib.slim.nets import resnet_v1

flags = tf.app.flags
flags.DEFINE_string("hparams", "", "overrides")
FLAGS = flags.FLAGS


def main(_):
    hparams = tf.contrib.training.HParams(learning_rate=0.5, feeds=[1.0]).parse(FLAGS.hparams)
    try:
        state_tuple = rnn.LSTMStateTuple is tf.nn.rnn_cell.LSTMStateTuple
    except AttributeError as err:  # TF 2.21: Keras 3 has no v1 RNN cells
        state_tuple = str(err)
    print(json.dumps({
        "slim": slim.__name__, "nets": resnet_v1.__name__, "utils": utils.__name__,
        "add_arg_scope": add_arg_scope.__module__, "tensorflow_core_is_tf": tensorflow_core is tf,
        "state_tuple": state_tuple,
        "hparams": hparams.values()}), flush=True)
    x = tf.placeholder(tf.float32, [])
    w = tf.get_variable("w", [], initializer=tf.ones_initializer())
    loss = w * x
    opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(hparams.learning_rate),
                                FixedLossScaleManager(2.0 ** 20))
    train_op = opt.minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for feed in hparams.feeds:
            sess.run(train_op, {x: np.float32(feed)})
            print(json.dumps({"feed": feed, "w": float(sess.run(w))}), flush=True)


if __name__ == "__main__":
    tf.app.run()
