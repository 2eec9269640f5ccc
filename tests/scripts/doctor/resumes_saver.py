"""A TF1 Session loop that resumes, as users write it: ``--model_dir`` on the command line, a
``Saver`` restoring ``tf.train.latest_checkpoint(model_dir)`` when there is one, training until
the global step reaches ``--train_steps`` and saving after every step.

The model: ``loss = w * w / 2`` with ``w`` (a resource variable: the loss is read before the
update, which needs its gradient ``w``) starting at 2.0 and plain SGD at 0.125 under an
``NPULossScaleOptimizer`` (scale 2**10, finite): ``w`` is multiplied by 0.875 at each applied
step, so the loss of the step after k of them is 2 * 0.765625 ** k: the loss of a run's first
step says where it started."""
import argparse

import tensorflow.compat.v1 as tf
from npu_bridge.npu_init import *  # noqa: F401,F403  pylint: disable=wildcard-import,unused-wildcard-import


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--train_steps", type=int, default=6)
    args = parser.parse_args()
    with tf.Graph().as_default():
        w = tf.get_variable("w", [], initializer=tf.constant_initializer(2.0),
                            use_resource=True)
        loss = tf.multiply(w * w, 0.5, name="loss")
        step = tf.train.get_or_create_global_step()
        manager = FixedLossScaleManager(loss_scale=2 ** 10)  # noqa: F405
        opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.125), manager)  # noqa: F405
        train_op = opt.minimize(loss, global_step=step)
        saver = tf.train.Saver(max_to_keep=20)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            latest = tf.train.latest_checkpoint(args.model_dir)
            if latest:
                saver.restore(sess, latest)
                print("restored %s" % latest)
            while sess.run(step) < args.train_steps:
                _, value = sess.run([train_op, loss])
                path = saver.save(sess, args.model_dir + "/model.ckpt", global_step=step)
                print("loss %.4f saved %s" % (value, path))


if __name__ == "__main__":
    main()
