"""An Ascend-shaped Estimator script: NPURunConfig + NPUEstimator + NPUEstimatorSpec (test fixture).

Written against the Ascend TF adapter as ModelZoo Estimator scripts use it, with no reference to
npu_loss_scale: ``import tensorflow as tf`` then ``from npu_bridge.estimator.npu.npu_config
import *`` (the star import must leave ``tf`` alone), ``NPURunConfig(iterations_per_loop=...,
precision_mode=..., dump_config=DumpConfig(...), ...)``, a ``model_fn`` returning
``NPUEstimatorSpec`` with ``NPULossScaleOptimizer`` around ``NPUDistributedOptimizer``,
``npu_ops.dropout`` and ``npu_unary_ops.gelu`` in the model, ``npu_hooks_append()``.

The model is float32, ``loss = sum(x @ kernel)`` on x = [[1, 1]]: the kernel's gradient is the
loss scale, which overflows float16 from 2**16 up — only under the device's precision_mode.
A hook prints one JSON line after each session run.
"""
import json
import sys

import tensorflow as tf
from npu_bridge.estimator.npu.npu_config import *  # noqa: F401,F403
from npu_bridge.estimator.npu.npu_estimator import NPUEstimator, NPUEstimatorSpec
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import (
    ExponentialUpdateLossScaleManager, NPULossScaleOptimizer)
from npu_bridge.estimator.npu.npu_optimizer import NPUDistributedOptimizer
from npu_bridge.estimator import npu_ops
from npu_bridge.estimator.npu_unary_ops import npu_unary_ops
from npu_bridge.npu_init import npu_hooks_append

tf.compat.v1.flags.DEFINE_string("model_dir", None, "checkpoint folder")
tf.compat.v1.flags.DEFINE_string("precision_mode", "allow_mix_precision", "device precision")
tf.compat.v1.flags.DEFINE_integer("iterations_per_loop", 2, "steps per session run")
tf.compat.v1.flags.DEFINE_integer("train_steps", 4, "global steps to train")
FLAGS = tf.compat.v1.flags.FLAGS


def emit(**record):
    print(json.dumps(record, sort_keys=True))
    sys.stdout.flush()


class ReportHook(tf.estimator.SessionRunHook):
    def begin(self):
        self._scale = tf.compat.v1.get_default_graph().get_tensor_by_name("loss_scale:0")
        self._step = tf.compat.v1.train.get_global_step()

    def after_run(self, run_context, run_values):
        scale, step = run_context.session.run([self._scale, self._step])
        emit(event="run", scale_after=float(scale), global_step=int(step))


def input_fn():
    features = tf.data.Dataset.from_tensors({"x": tf.constant([[1.0, 1.0]])}).repeat()
    return features.map(lambda f: (f, tf.constant([[0.0]])))


def model_fn(features, labels, mode, params):
    kernel = tf.compat.v1.get_variable("kernel", [2, 1],
                                       initializer=tf.compat.v1.ones_initializer())
    x = npu_ops.dropout(features["x"], keep_prob=1.0)
    logits = tf.matmul(x, kernel)
    loss = tf.reduce_sum(logits) + 0.0 * tf.reduce_sum(npu_unary_ops.gelu(logits))
    manager = ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 17, incr_every_n_steps=1000,
                                                decr_every_n_nan_or_inf=1, decr_ratio=0.5)
    opt = NPUDistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.001))
    opt = NPULossScaleOptimizer(opt, manager, is_distributed=True)
    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return NPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)


def main(_):
    emit(event="start", tf_module=tf.__name__)
    config = NPURunConfig(model_dir=FLAGS.model_dir, iterations_per_loop=FLAGS.iterations_per_loop,
                          precision_mode=FLAGS.precision_mode, save_checkpoints_steps=1000,
                          log_step_count_steps=None, enable_data_pre_proc=True,
                          dump_config=DumpConfig(enable_dump_debug=True,
                                                 dump_debug_mode="all"),
                          hcom_parallel=True, op_select_implmode="high_precision")
    estimator = NPUEstimator(model_fn=model_fn, config=config)
    estimator.train(input_fn=input_fn, max_steps=FLAGS.train_steps,
                    hooks=npu_hooks_append([ReportHook()]))
    emit(event="done", global_step=int(estimator.get_variable_value("global_step")),
         kernel=[float(v) for v in estimator.get_variable_value("kernel").ravel()])


if __name__ == "__main__":
    tf.compat.v1.app.run(main)
