"""An Ascend-shaped TF1 script written for TensorFlow 1.15 (test fixture; run with --tf1).

Plain ``import tensorflow as tf`` and TF1-only API: ``tf.flags``, ``tf.app.run``,
``tf.logging``, ``tf.placeholder``, ``tf.Session``, ``tf.ConfigProto``, a subclass of
``tf.train.Optimizer`` (in model.py next to it), and ``from npu_bridge.npu_init import *``
after the TensorFlow import; the optimizer is wrapped in ``NPULossScaleOptimizer``.
"""
import json

import tensorflow as tf
from npu_bridge.npu_init import *  # noqa: F401,F403

import model

tf.flags.DEFINE_integer("steps", 2, "training steps")
FLAGS = tf.flags.FLAGS


def main(_):
    import npu_loss_scale.device.register as package_module  # the package keeps TF 2.x
    tf.logging.set_verbosity(tf.logging.ERROR)
    x = tf.placeholder(tf.float32, [None, 2])
    kernel, loss = model.build(x)
    opt = NPULossScaleOptimizer(model.PlainSGD(0.5),  # noqa: F405
                                FixedLossScaleManager(loss_scale=1024))  # noqa: F405
    train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
    with tf.Session(config=npu_config_proto(tf.ConfigProto())) as sess:  # noqa: F405
        sess.run(tf.global_variables_initializer())
        for _ in range(FLAGS.steps):
            sess.run(train_op, feed_dict={x: [[1.0, 1.0]]})
        print(json.dumps({"script_tf": tf.__name__, "model_tf": model.tf.__name__,
                          "package_tf": package_module.tf.__name__,
                          "eager": tf.executing_eagerly(),
                          "kernel": [float(v) for v in sess.run(kernel).ravel()]}))


if __name__ == "__main__":
    tf.app.run(main)
