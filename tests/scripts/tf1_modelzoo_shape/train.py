"""A TF1 training script in the shape of Ascend's ModelZoo ones, written for the tests.

``from npu_bridge.npu_init import *`` first, ``tf.app.flags``, ``tf.contrib`` (an L2 regulariser
from ``tf.contrib.layers``), a batch-norm style moving average in ``UPDATE_OPS`` and the
loss-scale manager and optimizer built inside ``tf.control_dependencies(update_ops)``, as many
ModelZoo scripts do, then a ``tf.Session`` loop over fed values. Prints one JSON line describing
where ``tf.contrib`` came from, then one per step: ``w``, ``global_step`` and the loss scale.
"""
import json

from npu_bridge.npu_init import *  # noqa: F401,F403  pylint: disable=wildcard-import,unused-wildcard-import
import tensorflow as tf

flags = tf.app.flags
flags.DEFINE_string("feeds", "1.0,2.0,1e34", "the x fed at each step")
flags.DEFINE_float("l2", 1e-3, "scale of the L2 regulariser on w")
FLAGS = flags.FLAGS


def main(_):
    x = tf.placeholder(tf.float32, [], name="x")
    w = tf.get_variable("w", [], initializer=tf.ones_initializer())
    moving = tf.get_variable("moving_wx", [], trainable=False, initializer=tf.zeros_initializer())
    tf.add_to_collection(tf.GraphKeys.UPDATE_OPS, tf.assign(moving, 0.5 * moving + 0.5 * w * x))
    loss = w * x + tf.contrib.layers.l2_regularizer(FLAGS.l2)(w)
    global_step = tf.train.get_or_create_global_step()
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        manager = ExponentialUpdateLossScaleManager(  # noqa: F405
            init_loss_scale=2 ** 20, incr_every_n_steps=1000, decr_every_n_nan_or_inf=1,
            decr_ratio=0.5)
        opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.5), manager)  # noqa: F405
        train_op = opt.minimize(loss, global_step=global_step)
    contrib_lso = tf.contrib.mixed_precision.LossScaleOptimizer
    print(json.dumps({"contrib_module": contrib_lso.__module__,
                      "is_contrib_optimizer": isinstance(opt, contrib_lso)}), flush=True)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for value in FLAGS.feeds.split(","):
            sess.run(train_op, feed_dict={x: float(value)})
            w_now, step, scale = sess.run([w, global_step, manager.get_loss_scale()])
            print(json.dumps({"w": float(w_now), "global_step": int(step),
                              "loss_scale": float(scale)}), flush=True)


if __name__ == "__main__":
    tf.app.run()
