"""An Estimator script that resumes, as users write it: ``--model_dir`` on the command line,
``train(max_steps=--train_steps)`` then ``evaluate()`` (which reads the checkpoint the training
wrote), ``NPULossScaleOptimizer`` in the ``model_fn``.

The model: ``loss = w * w / 2`` with ``w`` (a resource variable) starting at 2.0 and plain SGD
at 0.125 (scale 2**10, finite): ``w`` is multiplied by 0.875 at each applied step, and the loss
of the step after k of them is 2 * 0.765625 ** k. ``evaluate`` prints the loss it
finds as ``eval loss <value> at step <global step>``."""
import argparse

import tensorflow as tf
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager

v1 = tf.compat.v1


def input_fn():
    return tf.data.Dataset.from_tensors(({"x": tf.constant([1.0])}, tf.constant([0.0]))).repeat()


def model_fn(features, labels, mode):  # pylint: disable=unused-argument
    w = v1.get_variable("w", [], initializer=v1.constant_initializer(2.0), use_resource=True)
    loss = 0.5 * w * w + 0.0 * tf.reduce_sum(features["x"])
    opt = NPULossScaleOptimizer(v1.train.GradientDescentOptimizer(0.125),
                                FixedLossScaleManager(loss_scale=2 ** 10))
    train_op = opt.minimize(loss, global_step=v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--train_steps", type=int, default=2)
    args = parser.parse_args()
    config = tf.estimator.RunConfig(model_dir=args.model_dir, save_checkpoints_steps=1,
                                    log_step_count_steps=None)
    estimator = tf.estimator.Estimator(model_fn=model_fn, config=config)
    estimator.train(input_fn=input_fn, max_steps=args.train_steps)
    result = estimator.evaluate(input_fn=input_fn, steps=1)
    print("eval loss %.4f at step %d" % (result["loss"], result["global_step"]))


if __name__ == "__main__":
    main()
