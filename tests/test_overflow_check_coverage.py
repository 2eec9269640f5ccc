"""The overflow check of compute_gradients runs on the scaled gradients, one sum per tensor:
a single inf or NaN anywhere in any gradient (the largest one included, at its first, a middle or
its last element) must make the step skip, even when the gradients are clipped elementwise before
apply_gradients (which turns an inf into a finite value)."""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls

SHAPES = [(3,), (40, 7), (300, 257), (5, 5)]   # the third is the largest
LARGEST = 2
LR = 0.5


def _step(backend, dtype, poison_at, value, clip):
    """Runs a poisoned step then a clean one; returns (weights after each, skipped steps)."""
    rng = np.random.RandomState(0)
    coeffs = [(rng.uniform(-1, 1, s) * 0.01).astype(dtype) for s in SHAPES]
    with tf.Graph().as_default():
        ws = [tf.compat.v1.get_variable("w%d" % i, initializer=np.ones(s, dtype))
              for i, s in enumerate(SHAPES)]
        cs = [tf.compat.v1.placeholder(dtype, s) for s in SHAPES]
        loss = tf.add_n([tf.reduce_sum(c * w) for c, w in zip(cs, ws)])
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                        nls.FixedLossScaleManager(2 ** 10), backend=backend)
        grads_and_vars = opt.compute_gradients(loss, ws)
        if clip:
            grads_and_vars = [(tf.clip_by_value(g, -1.0, 1.0), v) for g, v in grads_and_vars]
        train = opt.apply_gradients(grads_and_vars)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            poisoned = [c.copy() for c in coeffs]
            poisoned[LARGEST].reshape(-1)[poison_at] = value
            sess.run(train, dict(zip(cs, poisoned)))
            after_poison = sess.run(ws)
            sess.run(train, dict(zip(cs, coeffs)))
            return after_poison, sess.run(ws), sess.run(opt.skipped_steps), coeffs


@pytest.mark.parametrize("backend", ["inf_nan", "emulation"])
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_one_bad_element_of_the_largest_gradient_skips_the_step(backend, value, where):
    size = int(np.prod(SHAPES[LARGEST]))
    poison_at = {"first": 0, "middle": size // 2 + 1, "last": size - 1}[where]
    after_poison, after_clean, skipped, coeffs = _step(backend, np.float32, poison_at, value,
                                                       clip=False)
    for w in after_poison:
        np.testing.assert_array_equal(w, np.ones_like(w))       # nothing applied
    assert skipped == 1
    for w, c in zip(after_clean, coeffs):                        # the clean step is applied
        np.testing.assert_allclose(w, 1.0 - LR * c, rtol=1e-6)


@pytest.mark.parametrize("backend", ["inf_nan", "emulation"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_an_inf_clipped_to_a_finite_value_after_compute_gradients_still_skips(backend, dtype):
    size = int(np.prod(SHAPES[LARGEST]))
    after_poison, _, skipped, _ = _step(backend, dtype, size - 1, np.inf, clip=True)
    for w in after_poison:
        np.testing.assert_array_equal(w, np.ones_like(w))
    assert skipped == 1


@pytest.mark.parametrize("backend", ["inf_nan", "emulation"])
def test_a_scaled_gradient_that_overflows_skips_even_where_the_unscaled_one_is_finite(backend):
    """d(w * x * 2**20)/dw = 1e34 * 2**20 overflows float32, as it would on the device; the
    unscaled value 1e34 is finite. Checking the product of the unscaling instead would let the
    step through: TensorFlow's graph optimizer may fold (x * S) * (1 / S) into x."""
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [])
        w = tf.compat.v1.get_variable("w", [], initializer=tf.ones_initializer())
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                        nls.FixedLossScaleManager(2.0 ** 20), backend=backend)
        train = opt.minimize(w * x)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train, {x: np.float32(2.0)})
            assert sess.run(w) == 1.0 - LR * 2.0
            sess.run(train, {x: np.float32(1e34)})
            assert sess.run(w) == 1.0 - LR * 2.0
            assert sess.run(opt.skipped_steps) == 1
