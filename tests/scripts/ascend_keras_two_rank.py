"""An Ascend-shaped multi-device Keras script run as 2 emulated ranks (test fixture; `--ranks 2`).

Written as ModelZoo's Keras scripts for the TF adapter are, with no reference to npu_loss_scale:
``from npu_bridge.npu_init import *``, a session config with the ``NpuOptimizer`` custom
optimizer made Keras's session by ``set_keras_session_npu_config`` (run with ``--tf1``: TF 1.15
on the device), ``model.compile(optimizer=npu_distributed_optimizer_wrapper(...))`` and
``model.fit(..., callbacks=[NPUBroadcastGlobalVariablesCallback(0)])``, a second model through
``npu_keras_optimizer`` (``KerasDistributeOptimizer``) and ``npu_callbacks_append``, and
``hccl_ops.reduce_scatter`` in a session. With ``--tf2`` the same training runs as a TF2 script
would: ``npu_device.open()``, the names from ``npu_device.compat.v1.npu_init``, eager
``model.fit``.

Rank r starts from its own weights (kernel (r + 1) * [0.1, 0.2, -0.3], bias r) and fits its own
8 rows (seed r) in 2 batches of 4. One JSON line per record, with the rank.
"""
import argparse
import json
import os
import sys

import numpy as np
import tensorflow as tf

TF2 = "--tf2" in sys.argv
if TF2:
    import npu_device
    from npu_device.compat.v1.npu_init import *  # noqa: F401,F403
else:
    from npu_bridge.npu_init import *  # noqa: F401,F403

RANK_ID = int(os.getenv("RANK_ID", "0"))
RANK_SIZE = int(os.getenv("RANK_SIZE", "1"))


def emit(**record):
    print(json.dumps(dict(record, rank=RANK_ID), sort_keys=True))
    sys.stdout.flush()


def weights(model):
    return [w.tolist() for w in model.get_weights()]


class Record(tf.keras.callbacks.Callback):
    def __init__(self, name):
        super().__init__()
        self.name = name

    def on_train_begin(self, logs=None):
        emit(event="train_begin", model=self.name, weights=weights(self.model))

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:
            emit(event="first_batch", model=self.name, weights=weights(self.model))

    def on_train_end(self, logs=None):
        emit(event="train_end", model=self.name, weights=weights(self.model))


def build(name):
    kernel = np.array([[0.1], [0.2], [-0.3]], np.float32) * (RANK_ID + 1)
    return tf.keras.Sequential([tf.keras.layers.Dense(
        1, input_shape=(3,), name=name,
        kernel_initializer=tf.keras.initializers.Constant(kernel),
        bias_initializer=tf.keras.initializers.Constant(float(RANK_ID)))])


def reduce_scatter():
    base = np.arange(1, 9, dtype=np.float32).reshape(4, 2)
    with tf.Graph().as_default():
        mine = tf.constant(base * (RANK_ID + 1))
        summed = hccl_ops.reduce_scatter(mine, "sum", RANK_SIZE)  # noqa: F405
        largest = hccl_ops.reduce_scatter([mine], "max", RANK_SIZE)[0]  # noqa: F405
        try:
            hccl_ops.reduce_scatter(tf.ones([3, 2]), "sum", RANK_SIZE)  # noqa: F405
            odd = None
        except ValueError as err:
            odd = str(err)
        with tf.compat.v1.Session() as sess:
            got_sum, got_max = sess.run([summed, largest])
    emit(event="reduce_scatter", shape=summed.shape.as_list(), sum=got_sum.tolist(),
         max=got_max.tolist(), odd=odd)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tf2", action="store_true")
    args = parser.parse_args()
    if args.tf2:
        npu_device.open().as_default()
    else:
        sess_config = tf.ConfigProto()
        custom_op = sess_config.graph_options.rewrite_options.custom_optimizers.add()
        custom_op.name = "NpuOptimizer"
        custom_op.parameter_map["use_off_line"].b = True
        sess_config.graph_options.rewrite_options.remapping = RewriterConfig.OFF  # noqa: F405
        npu_keras_sess = set_keras_session_npu_config(config=sess_config)  # noqa: F405

    reduce_scatter()

    rng = np.random.RandomState(RANK_ID)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)

    model = build("wrapped")
    opt = npu_distributed_optimizer_wrapper(tf.keras.optimizers.SGD(learning_rate=0.1))  # noqa: F405
    model.compile(optimizer=opt, loss="mse")
    callbacks = [NPUBroadcastGlobalVariablesCallback(0), Record("wrapped")]  # noqa: F405
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)

    model = build("keras_distribute")
    opt = npu_keras_optimizer(tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9))  # noqa: F405
    model.compile(optimizer=opt, loss="mse")
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0,
              callbacks=npu_callbacks_append(callbacks_list=[Record("keras_distribute")]))  # noqa: F405
    emit(event="done")
    if not args.tf2:
        close_session(npu_keras_sess)  # noqa: F405


if __name__ == "__main__":
    main()
