"""MegatronMixedPrecisionOptimizer: clipping, grad norm, zero counts, bf16, fp32 main parameters."""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.optimizers.megatron import count_zeros, global_norm
from tf_versions import evaluate, tf2_only

W0 = np.array([[1.0, -2.0], [0.5, 3.0], [-1.5, 0.25]], np.float32)
B0 = np.array([0.1, -0.2], np.float32)
X = np.array([[1.0, 2.0, -1.0], [0.5, -1.0, 2.0], [3.0, 0.0, 1.0], [-2.0, 1.0, 0.5]], np.float32)


def _model(dtype=tf.float32):
    x = tf.constant(X, dtype)
    w = tf.compat.v1.get_variable("w", initializer=W0.astype(dtype.as_numpy_dtype))
    b = tf.compat.v1.get_variable("b", initializer=B0.astype(dtype.as_numpy_dtype))
    poison = tf.compat.v1.placeholder_with_default(1.0, [], name="poison")
    out = tf.cast(tf.matmul(x, w) + b, tf.float32)
    loss = tf.reduce_sum(tf.square(out)) * poison        # gradients of norm ~ 100
    return loss, [w, b], poison


# -- clipping and the grad norm ---------------------------------------------------------------
@pytest.mark.parametrize("clip", [0.0, 5.0, 1e4])
def test_finite_steps_apply_tf_clip_by_global_norm_of_the_unscaled_gradients(clip):
    with tf.Graph().as_default():
        loss, variables, poison = _model()
        plain_grads = tf.gradients(loss, variables)
        expected = (tf.clip_by_global_norm(plain_grads, clip)[0] if clip > 0 else plain_grads)
        expected_norm = tf.linalg.global_norm(plain_grads)
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(1.0), nls.ConstantGradScaler(2.0 ** 10),
            clip_grad=clip)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                before, want, want_norm = sess.run([variables, expected, expected_norm])
                _, norm = sess.run([train, opt.grad_norm])
                after = sess.run(variables)
                for b, w, a in zip(before, want, after):
                    np.testing.assert_array_equal(a, b - w)
                assert norm == want_norm
            assert sess.run(gs) == 3
    if clip == 5.0:
        assert np.isclose(np.sqrt(sum(np.sum((b - a) ** 2) for b, a in zip(before, after))), 5.0)


def test_skipped_steps_apply_nothing_and_report_nan_norm_and_minus_one_zeros():
    with tf.Graph().as_default():
        loss, variables, poison = _model()
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(1.0),
            nls.DynamicGradScaler(2.0 ** 10, 1.0, 2.0, 0.5, 100, 1),
            clip_grad=1.0, log_num_zeros_in_grad=True)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            before = sess.run(variables)
            _, norm, zeros = sess.run([train, opt.grad_norm, opt.num_zeros_in_grad],
                                      {poison: np.inf})
            assert np.isnan(norm) and zeros == -1
            for b, a in zip(before, sess.run(variables)):
                np.testing.assert_array_equal(a, b)
            assert sess.run([gs, opt.get_loss_scale()]) == [0, 512.0]
            _, norm, zeros = sess.run([train, opt.grad_norm, opt.num_zeros_in_grad])
            assert np.isfinite(norm) and zeros == 0 and sess.run(gs) == 1


def test_grad_norm_and_zero_count_of_hand_made_gradients():
    with tf.Graph().as_default():
        a = tf.compat.v1.get_variable("a", initializer=np.zeros((2, 2), np.float32))
        c = tf.compat.v1.get_variable("c", initializer=np.zeros(3, np.float32))
        e = tf.compat.v1.get_variable("e", initializer=np.zeros((4, 2), np.float32))
        grads = [tf.constant([[0.0, 3.0], [4.0, 0.0]]), tf.constant([0.0, 0.0, 12.0]),
                 tf.IndexedSlices(tf.constant([[0.0, 84.0]]), tf.constant([1]),
                                  tf.constant([4, 2]))]
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.5), nls.ConstantGradScaler(8.0),
            log_num_zeros_in_grad=True)
        train = opt.apply_gradients(zip(grads, [a, c, e]))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            _, norm, zeros = sess.run([train, opt.grad_norm, opt.num_zeros_in_grad])
            # 9 + 16 + 144 + 84**2 = 7225 = 85**2; zeros: 2 + 2 + 7 (dense 4x2 with one nonzero)
            assert norm == 85.0 and zeros == 11
            np.testing.assert_array_equal(sess.run(e)[1], [0.0, -42.0])
    assert evaluate(lambda: count_zeros([tf.constant([0.0, 1.0]), None])) == 1
    assert evaluate(lambda: global_norm([tf.constant([3.0], tf.float16), tf.constant([4.0])])) \
        == 5.0


@tf2_only
def test_clipping_and_norm_in_eager_mode():
    w = tf.Variable([3.0, 4.0])
    opt = nls.MegatronMixedPrecisionOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                              nls.ConstantGradScaler(4.0), clip_grad=1.0,
                                              log_num_zeros_in_grad=True)
    opt.minimize(lambda: 0.5 * tf.reduce_sum(w * w), var_list=[w])   # gradient = w, norm 5
    assert float(opt.grad_norm) == 5.0 and int(opt.num_zeros_in_grad) == 0
    np.testing.assert_allclose(w.numpy(), [3.0 - 0.6, 4.0 - 0.8], rtol=1e-6)
    assert opt.get_loss_scale().dtype == tf.float32 and float(opt.get_loss_scale()) == 4.0


def test_summaries_carry_grad_norm_and_zero_count():
    with tf.Graph().as_default():
        loss, _, _ = _model()
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1), nls.ConstantGradScaler(2.0),
            log_num_zeros_in_grad=True, summaries=True)
        train = opt.minimize(loss)
        merged = tf.compat.v1.summary.merge_all()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            _, raw = sess.run([train, merged])
    values = {v.tag: v.simple_value for v in tf.compat.v1.Summary.FromString(raw).value}
    assert {"npu_loss_scale/grad_norm", "npu_loss_scale/num_zeros_in_grad",
            "npu_loss_scale/loss_scale"} <= set(values)
    assert values["npu_loss_scale/grad_norm"] > 0
    assert values["npu_loss_scale/num_zeros_in_grad"] == 0


def test_stats_before_the_train_op_is_built_is_a_clear_error():
    with tf.Graph().as_default():
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1), nls.ConstantGradScaler(2.0))
        with pytest.raises(RuntimeError, match="grad_norm.*minimize"):
            opt.grad_norm  # noqa: B018
        assert opt.num_zeros_in_grad is None


# -- fp16 / bf16 modes ------------------------------------------------------------------------
def test_bf16_without_a_scaler_uses_scale_one_and_still_refuses_non_finite_updates():
    with tf.Graph().as_default():
        loss, variables, poison = _model(tf.bfloat16)
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.01), None, bf16=True)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            assert sess.run(opt.get_loss_scale()) == 1.0
            before = sess.run(variables)
            sess.run(train, {poison: np.nan})
            for b, a in zip(before, sess.run(variables)):
                np.testing.assert_array_equal(a, b)
            sess.run(train)
            assert sess.run(gs) == 1
            assert not np.array_equal(sess.run(variables[0]), before[0])
            assert opt.gradient_processor.main_param(variables[0]).dtype == tf.float32


def test_bf16_accepts_a_constant_scaler_and_fp16_requires_one():
    opt = nls.MegatronMixedPrecisionOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                              nls.ConstantGradScaler(64.0), bf16=True)
    assert evaluate(opt.get_loss_scale) == 64.0 and opt.bf16 and not opt.fp16
    with pytest.raises(ValueError, match="fp16"):
        nls.MegatronMixedPrecisionOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                            None, fp16=True)
    with pytest.raises(ValueError, match="both"):
        nls.MegatronMixedPrecisionOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                            nls.ConstantGradScaler(1.0), fp16=True, bf16=True)


@pytest.mark.parametrize("kwargs, exc, words", [
    ({"clip_grad": -1.0}, ValueError, ["clip_grad", "-1.0", ">= 0"]),
    ({"clip_grad": "1"}, TypeError, ["clip_grad", "'1'"]),
    ({"log_num_zeros_in_grad": 1}, TypeError, ["log_num_zeros_in_grad", "1"]),
    ({"grad_scaler": 1024}, TypeError, ["grad_scaler", "1024"]),
    ({"main_params": "yes"}, TypeError, ["main_params", "'yes'"]),
])
def test_bad_arguments_are_named(kwargs, exc, words):
    kwargs = dict({"grad_scaler": nls.ConstantGradScaler(1.0)}, **kwargs)
    with pytest.raises(exc) as info:
        nls.MegatronMixedPrecisionOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                            **kwargs)
    for w in words:
        assert w in str(info.value)


# -- fp32 main parameters ---------------------------------------------------------------------
RNG = np.random.RandomState(0)
FX = RNG.randn(64, 8).astype(np.float32)
FY = FX @ RNG.randn(8, 1).astype(np.float32)


def _regression(kind, steps=150, lr=2e-3):
    """Linear regression trained with SGD; returns the final weights as float64."""
    with tf.Graph().as_default():
        dtype = tf.float32 if kind == "fp32" else tf.float16
        w = tf.compat.v1.get_variable("w", initializer=np.ones((8, 1), dtype.as_numpy_dtype))
        pred = tf.cast(tf.matmul(tf.constant(FX, dtype), w), tf.float32)
        loss = tf.reduce_mean(tf.square(pred - FY))
        sgd = tf.compat.v1.train.GradientDescentOptimizer(lr)
        if kind == "fp32":
            opt = sgd
        elif kind == "fp16_plain":
            opt = nls.NPULossScaleOptimizer(sgd, nls.ConstantGradScaler(1024.0))
        else:
            opt = nls.MegatronMixedPrecisionOptimizer(sgd, nls.ConstantGradScaler(1024.0),
                                                      fp16=True)
        train = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(steps):
                sess.run(train)
            assert sess.run(w).dtype == dtype.as_numpy_dtype
            return sess.run(w).astype(np.float64)


def test_fp16_model_with_fp32_main_params_tracks_the_fp32_model_far_more_closely():
    reference = _regression("fp32")
    err_plain = np.abs(_regression("fp16_plain") - reference).max()
    err_main = np.abs(_regression("fp16_main") - reference).max()
    # measured (TF 2.15 and 2.21): plain fp16 4.9e-2 off, fp32 main params 4.0e-4 (ratio 124)
    assert err_plain > 30 * err_main, (err_plain, err_main)
    assert err_main < 2e-3


def test_main_params_are_float32_copies_checkpointed_by_saver_and_reloadable(tmp_path):
    path = str(tmp_path / "ckpt")
    with tf.Graph().as_default():
        loss, variables, _ = _model(tf.float16)
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.AdamOptimizer(1e-3), nls.ConstantGradScaler(16.0), fp16=True)
        train = opt.minimize(loss)
        w = variables[0]
        main = opt.gradient_processor.main_param(w)
        assert main.dtype == tf.float32 and not main.trainable
        assert main in tf.compat.v1.global_variables()
        assert main not in tf.compat.v1.trainable_variables()
        assert opt.get_slot(w, "m").dtype == tf.float32      # Adam's slots belong to the main copy
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            np.testing.assert_array_equal(sess.run(main), W0.astype(np.float16).astype(np.float32))
            for _ in range(3):
                sess.run(train)
            saved_main, saved_w = sess.run([main, w])
            np.testing.assert_array_equal(saved_main.astype(np.float16), saved_w)
            assert not np.array_equal(saved_main, saved_main.astype(np.float16).astype(np.float32))
            saver.save(sess, path)
            # a model-only load changes the model; reload_model_params refreshes the main copies
            sess.run(w.assign(tf.zeros_like(w)))
            opt.reload_model_params(session=sess)
            np.testing.assert_array_equal(sess.run(main), np.zeros_like(saved_main))
    with tf.Graph().as_default():
        loss, variables, _ = _model(tf.float16)
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.AdamOptimizer(1e-3), nls.ConstantGradScaler(16.0), fp16=True)
        opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            tf.compat.v1.train.Saver().restore(sess, path)
            np.testing.assert_array_equal(
                sess.run(opt.gradient_processor.main_param(variables[0])), saved_main)


@tf2_only
def test_main_params_round_trip_through_tf_train_checkpoint_in_eager(tmp_path):
    def build():
        w = tf.Variable(np.array([1.0, 2.0], np.float16))
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(1e-3), nls.ConstantGradScaler(4.0),
            fp16=True)
        return w, opt

    w, opt = build()
    for _ in range(3):
        opt.minimize(lambda: tf.reduce_sum(tf.cast(w, tf.float32) ** 2), var_list=[w])
    main = opt.gradient_processor.main_param(w)
    np.testing.assert_allclose(main.numpy(), np.array([1.0, 2.0]) * (1 - 2e-3) ** 3, rtol=1e-6)
    prefix = tf.train.Checkpoint(w=w, opt=opt).save(str(tmp_path / "ckpt"))
    w2, opt2 = build()
    opt2.gradient_processor.build_main_params([w2])
    tf.train.Checkpoint(w=w2, opt=opt2).restore(prefix)
    np.testing.assert_array_equal(opt2.gradient_processor.main_param(w2).numpy(), main.numpy())
    assert opt2.reload_model_params() is None
    np.testing.assert_array_equal(opt2.gradient_processor.main_param(w2).numpy(),
                                  w2.numpy().astype(np.float32))


def test_a_saturated_fp16_step_is_skipped_although_every_gradient_looks_finite():
    # Saturation mode (the conftest default): the fp16 activation becomes 65504, gradients stay
    # finite, only the emulated status register knows; the main copies must not move.
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 2])
        w = tf.compat.v1.get_variable("w", initializer=(1000 * np.eye(2)).astype(np.float16))
        y = nls.saturate(tf.matmul(tf.cast(x, tf.float16), w))
        loss = tf.reduce_sum(tf.cast(y, tf.float32))
        grads = tf.gradients(loss, [w])[0]
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(1e-3), nls.ConstantGradScaler(1.0),
            fp16=True, log_num_zeros_in_grad=True)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        main = opt.gradient_processor.main_param(w)
        big = np.full((2, 2), 100.0, np.float32)        # 100 * 1000 > 65504: saturates
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            assert np.all(np.isfinite(sess.run(grads, {x: big})))
            _, finite, norm = sess.run([train, opt.overflow_status_reduce_all, opt.grad_norm],
                                       {x: big})
            assert not finite and np.isnan(norm)
            np.testing.assert_array_equal(sess.run(main), 1000 * np.eye(2))
            assert sess.run(gs) == 0
            sess.run(train, {x: np.ones((2, 2), np.float32)})
            assert sess.run(gs) == 1
            np.testing.assert_allclose(sess.run(main), 1000 * np.eye(2) - 2e-3, rtol=1e-7)


def test_works_inside_a_tf_distribute_strategy_in_graph_mode():
    with tf.Graph().as_default():
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
        with strategy.scope():
            w = tf.compat.v1.get_variable("w", initializer=np.array([3.0, 4.0], np.float16))
            opt = nls.MegatronMixedPrecisionOptimizer(
                tf.compat.v1.train.GradientDescentOptimizer(1.0),
                nls.DynamicGradScaler(8.0, 1.0, 2.0, 0.5, 10, 1), clip_grad=1.0, fp16=True)

            def step():
                return opt.minimize(0.5 * tf.reduce_sum(tf.square(tf.cast(w, tf.float32))))

            train = strategy.group(strategy.extended.call_for_each_replica(step))
            norm = opt.grad_norm
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            assert sess.run([train, norm])[1] == 5.0         # gradient = w, clipped to norm 1
            np.testing.assert_allclose(sess.run(opt.gradient_processor.main_param(w)),
                                       [2.4, 3.2], rtol=1e-6)
            np.testing.assert_array_equal(sess.run(w), np.array([2.4, 3.2], np.float16))
