"""An Ascend-shaped TF2 8p-style script, run as 2 emulated ranks (test fixture; `--ranks 2`).

Written against the TF2 adapter as its ModelZoo scripts use it, with no reference to
npu_loss_scale: ``npu_device.open().as_default()`` in every process (RANK_ID/RANK_SIZE from the
launcher), ``npu_device.distribute.shard_and_rebatch_dataset(dataset, global_bs)``,
``npu_distributed_keras_optimizer_wrapper`` around the Keras optimizer,
``broadcast(model.trainable_variables, root_rank=0)`` once the model is built, explicit
``all_reduce(grads, "mean")`` in a custom loop, and ``npu_device.train.optimizer.
NpuLossScaleOptimizer``. Prints one JSON line per event (every line carries the rank); the test
computes what the values must be.

Phases (``--phases a,b``):

* ``collectives``: before ``open()`` (nothing exchanged, as on the device), then all_reduce with
  every reduction (eager, tf.function, nested function, cond branch), broadcast from rank 1,
  the dataset shard, and the errors of bad arguments.
* ``fit``: float32 ``model.fit`` of a linear model on this rank's shard of 8 samples, global
  batch 4, SGD 0.1 behind the wrapper, weights broadcast from rank 0 (each rank starts from
  its own).
* ``lso``: mixed float16 (run it with ``--saturate-every-op``): three steps, the second with
  rank 1's batch scaled by 1e5 (it saturates float16 on rank 1 only), in five set-ups: a
  tf.function custom loop with all_reduce(grads) before the loss-scale optimizer (``loop``),
  ``model.train_on_batch`` with the loss-scale optimizer outside (``inside``) and inside
  (``outside``) the wrapper, an eager custom loop with the optimizer outside the wrapper
  (``eager``; no saturation there, rank 1's float16 values overflow to inf), and ``loop`` with
  the agreement turned off (``unagreed``, the control: there the ranks must part).
* ``fail``: rank 1 raises after ``open()`` while rank 0 waits in an all_reduce.
* ``tf1``: ``npu_device.compat.enable_v1()`` before ``open()``: all_reduce and broadcast built
  into a TF1 graph and run by a session.
"""
import argparse
import json
import os
import sys
import warnings

import numpy as np
import tensorflow as tf

import npu_device as npu
from npu_device.train.optimizer import NpuLossScaleOptimizer

KERAS3 = hasattr(tf.keras.optimizers, "LossScaleOptimizer")
RANK = int(os.environ.get("RANK_ID", "0"))


def emit(**record):
    record["rank"] = RANK
    print(json.dumps(record, sort_keys=True))
    sys.stdout.flush()


def listed(values):
    return [None if v is None else np.asarray(v).tolist() for v in values]


def error_of(fn):
    try:
        fn()
    except Exception as err:  # pylint: disable=broad-except
        return "%s: %s" % (type(err).__name__, err)
    return None


def before_open():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = npu.distribute.all_reduce(tf.constant(float(RANK + 1)), "sum")
    emit(event="before_open", value=float(value), warnings=[str(w.message) for w in caught])


def collectives(device):
    r = device.worker_id
    emit(event="device", workers_num=device.workers_num, worker_id=device.worker_id,
         cluster_worker=device.is_cluster_worker())
    values = [tf.constant([1.0, 2.0]) * (r + 1), None, tf.constant([[3, 4]]) * (r + 1),
              tf.constant(5.0) * (r + 1)]
    for reduction in ("mean", "sum", "max", "min", "prod"):
        out = npu.distribute.all_reduce(values, reduction)
        emit(event="all_reduce", reduction=reduction, values=listed(out),
             dtypes=[None if v is None else v.dtype.name for v in out])
    single = npu.distribute.all_reduce(tf.constant([2.0, -1.0]) * (r + 1), "sum")
    pair = npu.distribute.all_reduce((tf.constant(1.0 + r), tf.constant(10.0 * r)), "max")
    emit(event="shapes", single=single.numpy().tolist(), pair_type=type(pair).__name__,
         pair=listed(pair))

    @tf.function
    def reduce_in_function(a, b):
        return npu.distribute.all_reduce([a, b], "sum")

    @tf.function
    def outer(a):
        inner = reduce_in_function(a, a * 2.0)
        return tf.cond(a > -1.0, lambda: npu.distribute.all_reduce(inner[0] + 1.0, "mean"),
                       lambda: a)

    for call in range(3):
        got = reduce_in_function(tf.constant(float(call + r)), tf.ones([2, 2]) * (r + 1))
        emit(event="function", call=call, values=listed(got))
    emit(event="nested", value=float(outer(tf.constant(float(r + 1)))))
    # more runs than the instance keys of one signature (they are reused in turn)
    emit(event="many_runs", values=[float(reduce_in_function(tf.constant(float(c * (r + 1))),
                                                             tf.zeros([2, 2]))[0])
                                    for c in range(100)],
         eager=[float(npu.distribute.all_reduce(tf.constant(float(c * (r + 1))), "max"))
                for c in range(100)])
    unknown = tf.function(lambda a: npu.distribute.all_reduce(a, "sum"),
                          input_signature=[tf.TensorSpec([None], tf.float32)])
    emit(event="unknown_shape", values=[unknown(tf.ones([n]) * (r + 1)).numpy().tolist()
                                        for n in (2, 3)])

    weights = tf.Variable([1.0 + r, -2.0 - r])
    step = tf.Variable(10 * (r + 1), dtype=tf.int64)
    flag = tf.Variable(r == 0)
    returned = npu.distribute.broadcast([weights, step, flag], root_rank=1)
    emit(event="broadcast", returned=returned, weights=weights.numpy().tolist(),
         step=int(step.numpy()), flag=bool(flag.numpy()))
    dataset, batch = npu.distribute.shard_and_rebatch_dataset(tf.data.Dataset.range(10), 4)
    emit(event="shard", elements=[int(e) for e in dataset.as_numpy_iterator()], batch=batch)

    @tf.function(jit_compile=True)
    def compiled(a):
        return npu.distribute.all_reduce(a, "sum")

    emit(event="errors",
         not_divisible=error_of(lambda: npu.distribute.shard_and_rebatch_dataset(dataset, 3)),
         root=error_of(lambda: npu.distribute.broadcast(weights, root_rank=2)),
         reduction=error_of(lambda: npu.distribute.all_reduce(weights, "avg")),
         group=error_of(lambda: npu.distribute.all_reduce(weights, "sum", group="group_a")),
         xla=error_of(lambda: compiled(tf.constant(1.0))))


def fit_data():
    x = np.array([[i + 1.0, (i % 3) - 1.0, 0.5 * i] for i in range(8)], np.float32)
    y = np.array([[2.0 * i - 3.0] for i in range(8)], np.float32)
    return x, y


def fit(device):
    x, y = fit_data()
    dataset, batch = npu.distribute.shard_and_rebatch_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)), 4)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(
        1, kernel_initializer=tf.keras.initializers.Constant(0.1 * (device.worker_id + 1)),
        bias_initializer=tf.keras.initializers.Constant(float(device.worker_id)))])
    emit(event="fit_init", weights=[w.ravel().tolist() for w in model.get_weights()])
    optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(
        tf.keras.optimizers.SGD(0.01))
    model.compile(optimizer=optimizer, loss="mse")
    npu.distribute.broadcast(model.trainable_variables, root_rank=0)
    model.fit(dataset.batch(batch), epochs=1, shuffle=False, verbose=0)
    emit(event="fit_done", batch=batch, data=[x.tolist(), y.tolist()],
         weights=[w.ravel().tolist() for w in model.get_weights()])


def lso(device):
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    for setup in ("loop", "inside", "outside", "eager", "unagreed"):
        model = tf.keras.Sequential([
            tf.keras.Input((4,)),
            tf.keras.layers.Dense(2, kernel_initializer=tf.keras.initializers.Constant(
                0.1 * (device.worker_id + 1))),
            tf.keras.layers.Dense(1, dtype="float32", kernel_initializer="ones")])
        sgd = tf.keras.optimizers.SGD(0.01)
        if setup == "loop":
            opt = scaler = NpuLossScaleOptimizer(sgd, initial_scale=16.0)
        elif setup == "unagreed":
            opt = scaler = NpuLossScaleOptimizer(sgd, initial_scale=16.0, is_distributed=False)
        elif setup in ("inside", "eager"):
            opt = scaler = NpuLossScaleOptimizer(
                npu.distribute.npu_distributed_keras_optimizer_wrapper(sgd), initial_scale=16.0)
        else:
            scaler = NpuLossScaleOptimizer(sgd, initial_scale=16.0)
            opt = npu.distribute.npu_distributed_keras_optimizer_wrapper(scaler)
        npu.distribute.broadcast(model.trainable_variables, root_rank=0)

        def step(x, y, reduce_grads):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
                scaled = opt.scale_loss(loss) if KERAS3 else opt.get_scaled_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            if not KERAS3:
                grads = opt.get_unscaled_gradients(grads)
            if reduce_grads:
                grads = npu.distribute.all_reduce(grads, "mean")
            opt.apply_gradients(zip(grads, model.trainable_variables))

        function_step = tf.function(lambda x, y: step(x, y, True))
        if setup in ("inside", "outside"):
            # Keras 3 compiles with XLA where it can; the emulated register is not XLA-compilable.
            # Keras 2 compiles without XLA (TF 2.6's compile has no jit_compile argument).
            model.compile(optimizer=opt, loss="mse", **({"jit_compile": False} if KERAS3 else {}))
        x = np.full((2, 4), 0.5 * (device.worker_id + 1), np.float32)
        y = np.zeros((2, 1), np.float32)
        for index, boost in enumerate([1.0, 1e5 if device.worker_id == 1 else 1.0, 1.0]):
            scale = float(scaler.loss_scale)
            if setup in ("loop", "unagreed"):
                function_step(tf.constant(x * boost), tf.constant(y))
            elif setup == "eager":
                step(tf.constant(x * boost), tf.constant(y), False)
            else:
                model.train_on_batch(x * boost, y)
            emit(event="lso", setup=setup, step=index, scale_before=scale,
                 finite=bool(scaler.last_step_finite.numpy()),
                 weights=[w.ravel().tolist() for w in model.get_weights()])


def tf1(device):
    r = device.worker_id
    mean = npu.distribute.all_reduce([tf.constant([1.0, 2.0]) * (r + 1), tf.constant(3) * (r + 1)],
                                     "mean")
    weights = tf.compat.v1.Variable([float(r), 5.0 + r])
    assign = npu.distribute.broadcast(weights, root_rank=1)
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        got = sess.run(mean)
        sess.run(assign)
        emit(event="tf1", mean=listed(got), weights=sess.run(weights).tolist())


def fail(device):
    if device.worker_id == 1:
        raise RuntimeError("rank 1 fails on purpose")
    npu.distribute.all_reduce(tf.constant(1.0), "sum")
    emit(event="not_reached")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--phases", default="collectives")
    phases = parser.parse_args().phases.split(",")
    if "collectives" in phases:
        before_open()
    if "tf1" in phases:
        npu.compat.enable_v1()
    npu.global_options().hcom_parallel = True
    device = npu.open().as_default()
    emit(event="opened", global_ctx=npu.global_npu_ctx() is device)
    for phase in phases:
        globals()[phase](device)
    emit(event="done")


if __name__ == "__main__":
    main()
