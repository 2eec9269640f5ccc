"""One Horovod rank training through MegatronMixedPrecisionOptimizer(hvd.DistributedOptimizer(..)).

Started by tests/test_mixed_precision_horovod.py with
``horovodrun -np 2 -H localhost:2 --gloo python megatron_worker.py OUT_DIR``. Each rank sees its
own data; rank 1's input is a million times larger at step 2, so only its fp16 activation
saturates (only its emulated status register is set). Every step the rank records the optimizer's
``grad_norm`` and ``num_zeros_in_grad``, the norm of the Horovod-averaged unscaled gradients
computed independently, the overflow flag and the variables, into ``OUT_DIR/rank<R>.json``.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402

STEPS, OVERFLOW_STEP, CLIP = 5, 2, 0.05


def main(out_dir):
    import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
    hvd.init()
    rank = hvd.rank()
    tf.compat.v1.disable_eager_execution()
    x = tf.compat.v1.placeholder(tf.float32, [4, 3])
    t = tf.compat.v1.placeholder(tf.float32, [4, 2])
    w = tf.compat.v1.get_variable("w", initializer=np.linspace(-0.5, 0.5, 6).reshape(3, 2)
                                  .astype(np.float32))
    y16 = nls.saturate(tf.cast(tf.matmul(x, w), tf.float16))
    loss = tf.reduce_mean(tf.square(tf.cast(y16, tf.float32) - t))
    # Independent reference: the unscaled gradient averaged over the ranks.
    expected_norm = tf.norm(hvd.allreduce(tf.gradients(loss, [w])[0], op=hvd.Average))
    opt = nls.MegatronMixedPrecisionOptimizer(
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5)),
        nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, growth_interval=100, hysteresis=1),
        clip_grad=CLIP, log_num_zeros_in_grad=True, is_distributed=True, agreement="horovod")
    train = opt.minimize(loss)
    records = []
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for step in range(STEPS):
            rng = np.random.RandomState(100 * rank + step)
            feed = {x: rng.uniform(-1, 1, (4, 3)).astype(np.float32),
                    t: rng.uniform(-1, 1, (4, 2)).astype(np.float32)}
            if rank == 1 and step == OVERFLOW_STEP:
                feed[x] = feed[x] * np.float32(1e6)
            want = float(sess.run(expected_norm, feed)) if step != OVERFLOW_STEP else None
            before = sess.run(w)
            _, finite, norm, zeros = sess.run(
                [train, opt.overflow_status_reduce_all, opt.grad_norm, opt.num_zeros_in_grad],
                feed)
            after = sess.run(w)
            records.append({"finite": bool(finite), "grad_norm": float(norm),
                            "num_zeros": int(zeros), "expected_norm": want,
                            "update_norm": float(np.linalg.norm(after - before)),
                            "w": after.tolist()})
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(records, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
