"""A user's Ascend training script (TF1 session loop) that restarts from its checkpoint.

Written as for the Ascend TF adapter: ``from npu_bridge.npu_init import *``,
``NPULossScaleOptimizer`` with an ``ExponentialUpdateLossScaleManager``, float16 through the
session config's ``precision_mode``, a ``Saver`` that restores the latest checkpoint of
``model_dir`` and saves one at the end, a loop until ``global_step`` reaches ``until``.
``main`` returns each step's ``opt.step_report``.

``loss = sum(x @ kernel)`` with x = [[1, 1]]: the kernel's gradient is the loss scale itself,
computed in float16 under ``allow_mix_precision``. From 2**17, the scale halves twice (65504 is
float16's largest value; a skipped step leaves ``global_step`` alone), then doubles every
``incr_every_n_steps`` good steps until it overflows again.

``saver_var_list="trainable"`` is the common mistake, ``tf.train.Saver(tf.trainable_variables())``:
the loss scale, the manager's counters and ``global_step`` are not saved; ``"no_counters"``
keeps the loss scale and ``global_step`` but not the manager's good- and bad-step counters.
"""
import os

import tensorflow.compat.v1 as tf
from npu_bridge.npu_init import *  # noqa: F401,F403


def session_config():
    config = tf.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("allow_mix_precision")
    return config


def _var_list(which):
    if which == "trainable":
        return tf.trainable_variables()
    if which == "no_counters":   # the scale and global_step kept, the manager's counters not
        return [v for v in tf.global_variables() if not v.op.name.endswith("steps_value")]
    return None     # every global variable, the Saver's default


def main(model_dir, until, init_loss_scale=2.0 ** 17, incr_every_n_steps=2,
         saver_var_list="global"):
    with tf.Graph().as_default():
        x = tf.constant([[1.0, 1.0]])
        kernel = tf.get_variable("kernel", [2, 1], initializer=tf.ones_initializer())
        loss = tf.reduce_sum(tf.matmul(x, kernel))
        global_step = tf.train.get_or_create_global_step()
        manager = ExponentialUpdateLossScaleManager(  # noqa: F405
            init_loss_scale=init_loss_scale, incr_every_n_steps=incr_every_n_steps,
            decr_every_n_nan_or_inf=1, decr_ratio=0.5)
        opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.001), manager)  # noqa: F405
        train_op = opt.minimize(loss, global_step=global_step)
        saver = tf.train.Saver(_var_list(saver_var_list))
        reports = []
        with tf.Session(config=session_config()) as sess:
            sess.run(tf.global_variables_initializer())
            checkpoint = tf.train.latest_checkpoint(model_dir)
            if checkpoint:
                saver.restore(sess, checkpoint)
            while sess.run(global_step) < until:
                _, report = sess.run([train_op, opt.step_report])
                reports.append(report)
            os.makedirs(model_dir, exist_ok=True)
            saver.save(sess, os.path.join(model_dir, "model.ckpt"), global_step=global_step)
        return reports
