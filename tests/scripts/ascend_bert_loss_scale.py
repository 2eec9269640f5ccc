"""An Ascend ModelZoo BERT training script cut down to its loss-scale wiring (test fixture).

It is written against the Ascend TF adapter exactly as the BERT scripts use it, with no
reference to npu_loss_scale: ``from npu_bridge.npu_init import *``, the flag
``--npu_bert_loss_scale`` choosing the manager (0 = dynamic, >= 1 = fixed), the manager handed to
``NPULossScaleOptimizer(opt, manager)`` — wrapped around ``NPUDistributedOptimizer`` with
``is_distributed=True`` when there is more than one rank — and clipping by global norm after the
gradients come back unscaled. Run it with ``python -m npu_loss_scale.emulate`` on CPU.

The model is one float16 matmul whose loss gradient is 1, so the scaled float16 gradient
overflows exactly when the loss scale is 2**16 or more. Each step prints one JSON line with the
tensors BERT's logging fetches by name (``loss_scale:0``, ``overflow_status_reduce_all:0``).
"""
import json
import sys

import tensorflow as tf
from npu_bridge.npu_init import *  # noqa: F401,F403
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager
from npu_bridge.estimator.npu.npu_loss_scale_manager import ExponentialUpdateLossScaleManager

flags = tf.compat.v1.flags
FLAGS = flags.FLAGS

flags.DEFINE_integer("npu_bert_loss_scale", 0,
                     "Whether to use loss scale, -1 is disable, 0 is dynamic loss scale, "
                     ">=1 is static loss scale")
flags.DEFINE_float("init_loss_scale_value", 2 ** 32, "Initial loss scale value")
flags.DEFINE_integer("num_train_steps", 8, "Number of training steps.")
flags.DEFINE_float("learning_rate", 0.25, "The initial learning rate.")


def emit(**record):
    print(json.dumps(record, sort_keys=True))
    sys.stdout.flush()


def create_model(features):
    kernel = tf.compat.v1.get_variable("dense/kernel", shape=[2, 1],
                                       initializer=tf.compat.v1.ones_initializer())
    logits = tf.matmul(tf.cast(features, tf.float16), tf.cast(kernel, tf.float16))
    return tf.reduce_sum(tf.cast(logits, tf.float32))


def create_optimizer(loss, init_lr):
    global_step = tf.compat.v1.train.get_or_create_global_step()
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(init_lr)

    if FLAGS.npu_bert_loss_scale == 0:
        loss_scale_manager = ExponentialUpdateLossScaleManager(
            init_loss_scale=FLAGS.init_loss_scale_value, incr_every_n_steps=1000,
            decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    elif FLAGS.npu_bert_loss_scale >= 1:
        loss_scale_manager = FixedLossScaleManager(loss_scale=FLAGS.npu_bert_loss_scale)
    else:
        raise ValueError("Invalid loss scale: %d" % FLAGS.npu_bert_loss_scale)

    if get_rank_size() > 1:  # noqa: F405  (from npu_init)
        optimizer = NPUDistributedOptimizer(optimizer)  # noqa: F405
        optimizer = NPULossScaleOptimizer(optimizer, loss_scale_manager, is_distributed=True)
    else:
        optimizer = NPULossScaleOptimizer(optimizer, loss_scale_manager)
    emit(event="optimizer", optimizer_module=type(optimizer).__module__,
         manager=type(loss_scale_manager).__name__,
         manager_module=type(loss_scale_manager).__module__,
         is_distributed=bool(optimizer.is_distributed))

    tvars = tf.compat.v1.trainable_variables()
    grads_and_vars = optimizer.compute_gradients(loss, tvars)
    grads = [g for g, _ in grads_and_vars]
    (grads, _) = tf.clip_by_global_norm(grads, clip_norm=1.0)
    return optimizer.apply_gradients(list(zip(grads, tvars)), global_step=global_step)


def main(_):
    with tf.Graph().as_default() as graph:
        features = tf.constant([[1.0, 1.0]], tf.float32)
        loss = create_model(features)
        train_op = create_optimizer(loss, FLAGS.learning_rate)
        loss_scale = graph.get_tensor_by_name("loss_scale:0")
        finite = [op for op in graph.get_operations()
                  if op.name.split("/")[-1] == "overflow_status_reduce_all"][0].outputs[0]
        global_step = tf.compat.v1.train.get_global_step()
        kernel = tf.compat.v1.trainable_variables()[0]
        with tf.compat.v1.Session(config=npu_config_proto()) as sess:  # noqa: F405
            sess.run(tf.compat.v1.global_variables_initializer())
            for step in range(FLAGS.num_train_steps):
                _, is_finite = sess.run([train_op, finite])
                scale, gstep = sess.run([loss_scale, global_step])
                emit(event="step", step=step, finite=bool(is_finite), loss_scale=float(scale),
                     global_step=int(gstep))
            emit(event="done", kernel=[float(v) for v in sess.run(kernel).ravel()])


if __name__ == "__main__":
    tf.compat.v1.app.run(main)
