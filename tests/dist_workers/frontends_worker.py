"""One Horovod rank training with the TF2 front ends; rank 1 alone overflows at OVERFLOW_STEP.

    horovodrun -np 2 -H localhost:2 --gloo python frontends_worker.py OUT_DIR

Eager, same data on every rank. For each configuration (GradScaler / Keras NpuLossScaleOptimizer,
with and without ``is_distributed``) it trains a tiny fp16 model 4 steps; at OVERFLOW_STEP rank
1's forward pass saturates (its emulated register is set; its gradients stay finite). Writes
``OUT_DIR/rank<R>.json`` = ``{config: [{"scale": float, "weights": [...]}, ...]}``.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

import npu_loss_scale as nls  # noqa: E402
from npu_loss_scale.device import register as emulation  # noqa: E402
from npu_loss_scale.keras import NpuLossScaleOptimizer  # noqa: E402

OVERFLOW_STEP = 1
STEPS = 4


def loss_of(w, rank, step):
    x = tf.constant([[1.0, 2.0]])
    if rank == 1 and step == OVERFLOW_STEP:
        emulation.saturate(tf.constant([1e5], tf.float16) * tf.constant(10.0, tf.float16))
    return tf.reduce_sum(tf.cast(tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16)),
                                 tf.float32) ** 2)


def run_scaler(distributed, rank):
    w = tf.Variable([[0.5], [0.25]])
    opt = tf.keras.optimizers.SGD(0.05)
    scaler = nls.GradScaler(init_scale=16.0, is_distributed=distributed,
                            agreement="horovod" if distributed else None)
    records = []
    for step in range(STEPS):
        with tf.GradientTape() as tape:
            scaled = scaler.scale(loss_of(w, rank, step))
        grads = tape.gradient(scaled, [w])
        scaler.step(opt, list(zip(grads, [w])))
        scaler.update()
        records.append({"scale": scaler.get_scale(), "weights": w.numpy().ravel().tolist()})
    return records


def run_keras(distributed, rank):
    w = tf.Variable([[0.5], [0.25]])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.05), initial_scale=16.0,
                                is_distributed=distributed,
                                agreement="horovod" if distributed else None)
    keras3 = hasattr(tf.keras.optimizers, "LossScaleOptimizer")
    records = []
    for step in range(STEPS):
        with tf.GradientTape() as tape:
            loss = loss_of(w, rank, step)
            scaled = opt.scale_loss(loss) if keras3 else opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled, [w])
        if not keras3:
            grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(list(zip(grads, [w])))
        records.append({"scale": float(opt.loss_scale), "weights": w.numpy().ravel().tolist(),
                        "finite": bool(opt.last_step_finite.numpy())})
    return records


def main():
    out_dir = sys.argv[1]
    hvd.init()
    rank = hvd.rank()
    results = {}
    for name, fn in (("scaler", run_scaler), ("keras", run_keras)):
        for distributed in (True, False):
            emulation.npu_clear_float_status_v2()
            results["%s_%s" % (name, "agree" if distributed else "alone")] = fn(distributed, rank)
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
