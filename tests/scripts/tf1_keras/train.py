"""An Ascend-shaped TF1 Keras script (test fixture): ``model.fit`` in the session that
``set_keras_session_npu_config`` makes, with a TF1 optimizer wrapped in ``NPULossScaleOptimizer``.

Written as ModelZoo's Keras scripts for the TF adapter are, with no reference to npu_loss_scale:
``import tensorflow as tf`` (TF 1.15 on the device; run with ``--tf1`` here), ``from
npu_bridge.npu_init import *``, a session config whose ``NpuOptimizer`` sets ``precision_mode``,
``set_keras_session_npu_config(config=...)``, the Keras backend module imported from its TF 1.15
path (``tensorflow.python.keras.backend``) and ``K.set_session``, then ``model.compile`` with
``NPULossScaleOptimizer(tf.train.AdamOptimizer(...), ExponentialUpdateLossScaleManager(...))`` and
``model.fit`` on numpy arrays.

The model is float32 code. Under ``allow_mix_precision`` its matmuls run in float16 on the
device, so an initial loss scale of 2**32 overflows and the first steps are skipped while the
scale halves. A callback prints one JSON line per batch: the loss scale and Keras's optimizer
iteration count.
"""
import argparse
import json
import sys

import numpy as np
import tensorflow as tf
from npu_bridge.npu_init import *  # noqa: F401,F403
from tensorflow.python.keras import backend as K


def emit(**record):
    print(json.dumps(record, sort_keys=True))
    sys.stdout.flush()


class StepLog(tf.keras.callbacks.Callback):
    def __init__(self, sess):
        super().__init__()
        self.sess = sess
        self.scale = sess.graph.get_tensor_by_name("loss_scale:0")

    def on_train_batch_end(self, batch, logs=None):
        scale, step = self.sess.run([self.scale, self.model.optimizer.iterations])
        emit(event="batch", loss_scale=float(scale), iterations=int(step),
             loss=float((logs or {}).get("loss", float("nan"))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision_mode", default="allow_mix_precision")
    parser.add_argument("--init_loss_scale", type=float, default=2 ** 32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps_per_epoch", type=int, default=10)
    args = parser.parse_args()
    emit(event="start", tf_module=tf.__name__)

    sess_config = tf.ConfigProto()
    custom_op = sess_config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes(args.precision_mode)
    sess_config.graph_options.rewrite_options.remapping = RewriterConfig.OFF  # noqa: F405
    sess_config.graph_options.rewrite_options.memory_optimization = RewriterConfig.OFF  # noqa: F405
    sess = set_keras_session_npu_config(config=sess_config)  # noqa: F405
    K.set_session(sess)

    rng = np.random.RandomState(0)
    x = rng.normal(size=(8 * args.steps_per_epoch, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)),
                                 tf.keras.layers.Dense(1)])
    manager = ExponentialUpdateLossScaleManager(  # noqa: F405
        init_loss_scale=args.init_loss_scale, incr_every_n_steps=1000,
        decr_every_n_nan_or_inf=1, decr_ratio=0.5)
    opt = NPULossScaleOptimizer(tf.train.AdamOptimizer(learning_rate=0.01), manager)  # noqa: F405
    model.compile(optimizer=opt, loss="mse")
    first = model.evaluate(x, y, batch_size=8, verbose=0)
    model.fit(x, y, batch_size=8, epochs=args.epochs, steps_per_epoch=None, shuffle=False,
              verbose=0, callbacks=[StepLog(sess)])
    last = model.evaluate(x, y, batch_size=8, verbose=0)
    emit(event="done", first_loss=float(first), last_loss=float(last))
    close_session(sess)  # noqa: F405


if __name__ == "__main__":
    main()
