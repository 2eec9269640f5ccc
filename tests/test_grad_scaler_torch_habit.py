"""torch code ported line by line ignores ``unscale_``'s result (torch unscales ``.grad`` in
place): ``step`` then gets the scaled gradients. It must raise, on every path, instead of
applying them; the same code using ``unscale_``'s result trains.

The issue's example: ``w = [1, 2]``, loss ``sum(w*w)`` (gradient ``[2, 4]``), SGD 0.1,
``init_scale=1024``: one step gives ``w = [0.8, 1.6]`` (hand computation); the scaled gradients
applied would give ``[-203.8, -407.6]``.
"""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls

HABIT = "computed from the scaled gradients passed to unscale_"

# optimizer, w after one step on the gradient [2, 4] from w = [1, 2] (hand computations)
OPTIMIZERS = {
    "keras_sgd": (lambda: tf.keras.optimizers.SGD(0.1), [0.8, 1.6]),
    # Adam's first step moves each weight by lr * g / (|g| + eps'): lr = 0.1
    "keras_adam": (lambda: tf.keras.optimizers.Adam(0.1), [0.9, 1.9]),
    # momentum's first step: accumulator = g
    "v1_momentum": (lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9), [0.8, 1.6]),
}


def _scaled_grads(scaler, w):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w)
        scaled = scaler.scale(loss)
    return tape.gradient(scaled, [w])


def _iteration(scaler, opt, w, clip, use_result):
    """The issue's torch-shaped step; ``use_result`` keeps what unscale_ returns."""
    grads = _scaled_grads(scaler, w)
    if use_result:
        grads = scaler.unscale_(opt, grads)
    else:
        scaler.unscale_(opt, grads)                      # the result ignored, as in torch
    if clip:
        grads, _ = tf.clip_by_global_norm(grads, 1e9)
    scaler.step(opt, list(zip(grads, [w])))
    scaler.update()


def _threaded_iteration(scaler, opt, w, clip, use_result):
    with nls.OptimizerThread(scaler) as thread:
        grads = _scaled_grads(scaler, w)
        if use_result:
            grads = scaler.unscale_(opt, grads)
        else:
            scaler.unscale_(opt, grads)
        if clip:
            grads, _ = tf.clip_by_global_norm(grads, 1e9)
        thread.submit(lambda: scaler.step(opt, list(zip(grads, [w]))))
        scaler.update()


def _run(path, scaler, opt, w, clip, use_result):
    if path == "thread":
        _threaded_iteration(scaler, opt, w, clip, use_result)
    elif path == "tf_function":
        tf.function(_iteration)(scaler, opt, w, clip, use_result)
    else:
        _iteration(scaler, opt, w, clip, use_result)


@pytest.mark.parametrize("clip", [False, True], ids=["no_clip", "clip"])
@pytest.mark.parametrize("path", ["eager", "tf_function", "thread"])
@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_the_scaled_gradients_are_refused_and_nothing_is_applied(opt_name, path, clip):
    make_opt, _ = OPTIMIZERS[opt_name]
    w = tf.Variable([1.0, 2.0], name="w")
    scaler = nls.GradScaler(init_scale=1024.0)
    with pytest.raises(RuntimeError, match=r"(?s)gradient given for 'w:0' was " + HABIT
                       + r".*grads = scaler\.unscale_\(optimizer, grads\)"):
        _run(path, scaler, make_opt(), w, clip, use_result=False)
    assert w.numpy().tolist() == [1.0, 2.0]


@pytest.mark.parametrize("clip", [False, True], ids=["no_clip", "clip"])
@pytest.mark.parametrize("path", ["eager", "tf_function", "thread"])
@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_the_same_code_using_unscales_result_trains(opt_name, path, clip):
    make_opt, expected = OPTIMIZERS[opt_name]
    w = tf.Variable([1.0, 2.0], name="w")
    scaler = nls.GradScaler(init_scale=1024.0)
    _run(path, scaler, make_opt(), w, clip, use_result=True)
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-5)


def test_only_the_gradient_computed_from_the_scaled_ones_is_named():
    a, b = tf.Variable([1.0], name="a"), tf.Variable([2.0], name="b")
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=8.0)
    scaled = [tf.constant([16.0]), tf.constant([32.0])]
    unscaled = scaler.unscale_(opt, scaled)
    with pytest.raises(RuntimeError, match=r"gradient given for 'b:0' was " + HABIT):
        scaler.step(opt, [(unscaled[0], a), (scaled[1] * 1.0, b)])
    scaler.step(opt, [(unscaled[0], a), (unscaled[1], b)])       # corrected: applied
    scaler.update()
    np.testing.assert_allclose([a.numpy()[0], b.numpy()[0]], [0.8, 1.6], rtol=1e-6)


def test_the_record_stops_at_update_even_without_a_step():
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=8.0)
    scaler.unscale_(opt, [tf.constant([16.0])])
    record = scaler._current().states[id(opt)]["handed_out"]   # pylint: disable=protected-access
    assert record.tape._recording                                # pylint: disable=protected-access
    scaler.update()
    assert not record.tape._recording                            # pylint: disable=protected-access
