"""Train a small fp16 classifier with NPULossScaleOptimizer and watch the loss scale move.

Runs on a CPU in a few seconds, on the emulation backend (saturation mode, as on an Atlas 910):

    python examples/train_small_fp16.py --steps 300

The model computes in float16 with float32 master weights; every fp16 layer output passes through
``npu_loss_scale.saturate`` as it would saturate on the device. The loss scale starts at 2**32
(the Ascend BERT default), so the first steps overflow: they are skipped, the scale backs off, and
training proceeds. Printed: the loss-scale trajectory, the skipped steps and the accuracy.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import npu_loss_scale as nls  # noqa: E402


def make_data(n, dim, classes, seed):
    """Gaussian blobs: a learnable, deterministic classification problem."""
    rng = np.random.RandomState(seed)
    centers = rng.randn(classes, dim).astype(np.float32) * 0.5
    labels = rng.randint(0, classes, size=n)
    points = centers[labels] + rng.randn(n, dim).astype(np.float32)
    return points, labels.astype(np.int32)


def dense16(x, units, name, activation=None):
    """A dense layer with float32 master weights computing in float16 (then saturated)."""
    w = tf.compat.v1.get_variable(name + "/kernel", [int(x.shape[-1]), units], tf.float32,
                                  tf.compat.v1.glorot_uniform_initializer())
    b = tf.compat.v1.get_variable(name + "/bias", [units], tf.float32,
                                  tf.compat.v1.zeros_initializer())
    y = tf.matmul(x, tf.cast(w, tf.float16)) + tf.cast(b, tf.float16)
    if activation is not None:
        y = activation(y)
    return nls.saturate(y)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--init-loss-scale", type=float, default=2.0 ** 32)
    parser.add_argument("--incr-every-n-steps", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=25)
    args = parser.parse_args(argv)

    x_all, y_all = make_data(5120, 16, 4, seed=0)
    x_train, y_train, x_test, y_test = x_all[:4096], y_all[:4096], x_all[4096:], y_all[4096:]

    graph = tf.Graph()
    with graph.as_default():
        return _train(args, x_train, y_train, x_test, y_test)


def _train(args, x_train, y_train, x_test, y_test):
    tf.compat.v1.set_random_seed(0)
    x = tf.compat.v1.placeholder(tf.float32, [None, 16])
    y = tf.compat.v1.placeholder(tf.int32, [None])
    h = dense16(tf.cast(x, tf.float16), 64, "hidden", tf.nn.relu)
    logits = tf.cast(dense16(h, 4, "out"), tf.float32)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y),
                                      tf.float32))

    manager = nls.ExponentialUpdateLossScaleManager(
        init_loss_scale=args.init_loss_scale, incr_every_n_steps=args.incr_every_n_steps,
        decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(args.learning_rate), manager)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=global_step)

    print("backend: %s, overflow mode: %s" % (opt.backend_name, "INF/NaN"
                                               if nls.is_inf_nan_enabled() else "saturation"))
    rng = np.random.RandomState(1)
    trajectory = []
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for step in range(args.steps):
            idx = rng.randint(0, len(x_train), args.batch_size)
            scale_before = sess.run(opt.loss_scale)
            _, finite, loss_value = sess.run([train_op, opt.overflow_status_reduce_all, loss],
                                             {x: x_train[idx], y: y_train[idx]})
            trajectory.append((step, float(scale_before), bool(finite)))
            if step % args.log_every == 0 or not finite:
                print("step %4d  loss %8.4f  loss_scale %14.1f  %s" % (
                    step, loss_value, scale_before, "applied" if finite else "SKIPPED (overflow)"))
        skipped, applied, final_scale = sess.run([opt.skipped_steps, global_step, opt.loss_scale])
        acc = sess.run(accuracy, {x: x_test, y: y_test})

    changes = [(s, sc) for i, (s, sc, _) in enumerate(trajectory)
               if i == 0 or sc != trajectory[i - 1][1]]
    print("loss-scale trajectory (step: scale): " +
          ", ".join("%d: %g" % c for c in changes) + ", end: %g" % final_scale)
    print("steps run %d, applied %d, skipped %d" % (args.steps, applied, skipped))
    print("held-out accuracy %.4f" % acc)
    return {"skipped": int(skipped), "applied": int(applied), "accuracy": float(acc),
            "final_scale": float(final_scale)}


if __name__ == "__main__":
    main()
