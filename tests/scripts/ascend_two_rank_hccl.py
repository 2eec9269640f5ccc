"""An Ascend-shaped 8p-style script run as 2 emulated ranks (test fixture; `--ranks 2`).

Written against the Ascend TF adapter as its multi-device scripts use it, with no reference to
npu_loss_scale: rank numbers from ``get_rank_id()``/``get_rank_size()`` (RANK_ID/RANK_SIZE),
``hccl_ops.allreduce`` and ``hccl_ops.broadcast``, ``NPUDistributedOptimizer`` averaging the
gradients, ``NPULossScaleOptimizer(..., is_distributed=True)`` and
``NPUBroadcastGlobalVariablesHook`` (through ``npu_hooks_append``) in a MonitoredSession.

Each rank feeds x = [[r + 1, r + 1]] to ``loss = sum(x @ kernel)``: the kernel's gradient is
(r + 1) * scale. Under ``allow_mix_precision`` with scale 2**15, rank 1's gradient (65536)
overflows float16 and rank 0's (32768) does not: the ranks must agree to skip that step.
"""
import json
import sys

import tensorflow.compat.v1 as tf
from npu_bridge.npu_init import *  # noqa: F401,F403

tf.disable_v2_behavior()


def emit(**record):
    print(json.dumps(record, sort_keys=True))
    sys.stdout.flush()


def main():
    rank, size = get_rank_id(), get_rank_size()  # noqa: F405
    value = tf.constant([float(rank + 1)])
    summed = hccl_ops.allreduce(value, "sum")  # noqa: F405
    root = hccl_ops.broadcast([value * 10.0], 0)[0]  # noqa: F405
    init = 1.0 + rank  # different on each rank: the broadcast hook makes rank 0's win
    kernel = tf.get_variable("kernel", [2, 1], initializer=tf.constant_initializer(init))
    x = tf.constant([[rank + 1.0, rank + 1.0]])
    loss = tf.reduce_sum(tf.matmul(x, kernel))
    manager = ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 15,  # noqa: F405
                                                incr_every_n_steps=1000,
                                                decr_every_n_nan_or_inf=1, decr_ratio=0.5)
    opt = NPUDistributedOptimizer(tf.train.GradientDescentOptimizer(0.125))  # noqa: F405
    opt = NPULossScaleOptimizer(opt, manager, is_distributed=True)  # noqa: F405
    global_step = tf.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=global_step)
    scale = tf.get_default_graph().get_tensor_by_name("loss_scale:0")
    config = npu_config_proto()  # noqa: F405
    config.graph_options.rewrite_options.custom_optimizers[0] \
        .parameter_map["precision_mode"].s = b"allow_mix_precision"
    hooks = npu_hooks_append([])  # noqa: F405
    with tf.train.MonitoredSession(
            session_creator=tf.train.ChiefSessionCreator(config=config), hooks=hooks) as sess:
        emit(event="collectives", rank=rank, size=size, summed=float(sess.run(summed)[0]),
             root=float(sess.run(root)[0]), kernel0=float(sess.run(kernel)[0, 0]))
        for _ in range(3):
            before = float(sess.run(scale))
            sess.run(train_op)
            emit(event="step", rank=rank, scale_before=before,
                 global_step=int(sess.run(global_step)))
        emit(event="done", rank=rank, kernel=[float(v) for v in sess.run(kernel).ravel()])


if __name__ == "__main__":
    main()
