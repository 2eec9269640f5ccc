"""A user's own Ascend training script (TF1 session loop), as the README's pytest example tests it.

Written as for the Ascend TF adapter, with no reference to npu_loss_scale: ``from
npu_bridge.npu_init import *``, ``NPULossScaleOptimizer`` with an
``ExponentialUpdateLossScaleManager``, float16 turned on through the session config's
``precision_mode``, and a ``Session`` loop. ``main`` returns each step's ``opt.step_report``.

The model is float32: ``loss = sum(x @ kernel)`` with x = [[1, 1]], so the kernel's gradient
is the loss scale itself. Under ``allow_mix_precision`` the gradient matmul runs in float16,
whose largest value is 65504: scales 2**17 and 2**16 overflow (the step is skipped and the
scale halves), 2**15 fits.
"""
import argparse

import tensorflow.compat.v1 as tf
from npu_bridge.npu_init import *  # noqa: F401,F403


def session_config(precision_mode):
    config = tf.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes(precision_mode)
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF  # noqa: F405
    return config


def main(steps=4, init_loss_scale=2.0 ** 17, precision_mode="allow_mix_precision"):
    with tf.Graph().as_default():
        x = tf.constant([[1.0, 1.0]])
        kernel = tf.get_variable("kernel", [2, 1], initializer=tf.ones_initializer())
        loss = tf.reduce_sum(tf.matmul(x, kernel))
        manager = ExponentialUpdateLossScaleManager(  # noqa: F405
            init_loss_scale=init_loss_scale, incr_every_n_steps=1000,
            decr_every_n_nan_or_inf=1, decr_ratio=0.5)
        opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.001), manager)  # noqa: F405
        train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
        reports = []
        with tf.Session(config=session_config(precision_mode)) as sess:
            sess.run(tf.global_variables_initializer())
            for step in range(steps):
                _, report = sess.run([train_op, opt.step_report])
                print("step %d: loss scale %g, finite %s"
                      % (step, report["loss_scale"], report["finite"]))
                reports.append(report)
        return reports


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--init_loss_scale", type=float, default=2.0 ** 17)
    args = parser.parse_args()
    main(args.steps, args.init_loss_scale)
