"""An Ascend-shaped TF1 session script: fp16 is turned on through the session config (test fixture).

Written against the Ascend TF adapter as ModelZoo session scripts use it, with no reference to
npu_loss_scale: ``import tensorflow.compat.v1 as tf`` *before* ``from npu_bridge.npu_init
import *``, the ``NpuOptimizer`` custom optimizer with ``parameter_map["precision_mode"]`` set
from a flag, ``NPULossScaleOptimizer`` with an ``ExponentialUpdateLossScaleManager`` and
``is_distributed=True`` as some scripts pass unconditionally, ``util.set_iteration_per_loop``.

The model is written in float32: ``loss = sum(x @ kernel)`` with x = [[1, 1]], so the kernel's
gradient is the loss scale itself. On the device under ``allow_mix_precision`` the matmul (and
its gradient matmul) run in float16, so a loss scale of 2**16 or more overflows; in float32 it
never does. Each step prints one JSON line.
"""
import json
import sys

import tensorflow.compat.v1 as tf
from npu_bridge.npu_init import *  # noqa: F401,F403

tf.disable_v2_behavior()
flags = tf.flags
FLAGS = flags.FLAGS
flags.DEFINE_string("precision_mode", "allow_mix_precision", "precision mode of the device")
flags.DEFINE_float("init_loss_scale", 2 ** 17, "initial loss scale")
flags.DEFINE_integer("steps", 6, "session runs")
flags.DEFINE_integer("iterations_per_loop", 1, "training steps per session run")


def emit(**record):
    print(json.dumps(record, sort_keys=True))
    sys.stdout.flush()


def main(_):
    emit(event="start", tf_module=tf.__name__)
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    kernel = tf.get_variable("kernel", [2, 1], initializer=tf.ones_initializer())
    loss = tf.reduce_sum(tf.matmul(x, kernel))
    global_step = tf.train.get_or_create_global_step()
    manager = ExponentialUpdateLossScaleManager(  # noqa: F405
        init_loss_scale=FLAGS.init_loss_scale, incr_every_n_steps=1000,
        decr_every_n_nan_or_inf=1, decr_ratio=0.5)
    opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.001), manager,  # noqa: F405
                                is_distributed=True)
    train_op = opt.minimize(loss, global_step=global_step)
    scale = tf.get_default_graph().get_tensor_by_name("loss_scale:0")

    config = tf.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes(FLAGS.precision_mode)
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF  # noqa: F405
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        train_op = util.set_iteration_per_loop(sess, train_op,  # noqa: F405
                                               FLAGS.iterations_per_loop)
        for _ in range(FLAGS.steps):
            before = sess.run(scale)
            sess.run(train_op, feed_dict={x: [[1.0, 1.0]]})
            emit(event="step", scale_before=float(before),
                 global_step=int(sess.run(global_step)))
        emit(event="done", kernel=[float(v) for v in sess.run(kernel).ravel()])


if __name__ == "__main__":
    tf.app.run(main)
