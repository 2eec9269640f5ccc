"""Regression tests for the smaller defects of "never lose an overflow" (one test each)."""
import os

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.device import register as emulation
from npu_loss_scale.scaling import managers as policy
from npu_loss_scale.frontends.hooks import LossScaleHook
from npu_loss_scale.optimizers import loss_scale as optimizer_module
from tf_versions import TF1, tf_mixed_precision
from warned import stuck

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sgd():
    return tf.compat.v1.train.GradientDescentOptimizer(0.5)


def test_strategy_agreement_outside_any_strategy_is_an_error(graph, monkeypatch):
    monkeypatch.setenv("RANK_SIZE", "2")
    w = tf.compat.v1.get_variable("w", initializer=1.0)
    opt = nls.NPULossScaleOptimizer(_sgd(), nls.FixedLossScaleManager(4), is_distributed=True,
                                    agreement="strategy")
    with pytest.raises(RuntimeError, match="agreement='strategy' needs a tf.distribute strategy"):
        opt.minimize(w * 2.0)


def test_docs_no_longer_claim_managers_work_with_tensorflows_own_optimizer():
    """TensorFlow's MixedPrecisionLossScaleOptimizer never calls update_loss_scale on them."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        w = tf.compat.v1.get_variable("w", initializer=1.0)
        mgr = nls.ExponentialUpdateLossScaleManager(8, 1, decr_every_n_nan_or_inf=1)
        theirs = tf_mixed_precision.MixedPrecisionLossScaleOptimizer(_sgd(), mgr)
        train = theirs.minimize(w * 2.0)
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(train)
        assert sess.run(mgr.get_loss_scale()) == 8.0          # never updated
    if TF1:
        # TF 1.15's tf.contrib.mixed_precision.LossScaleOptimizer, the class ours subclasses
        # there, does update a manager (and the docstring says so)
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            w = tf.compat.v1.get_variable("w", initializer=1.0)
            mgr = nls.ExponentialUpdateLossScaleManager(8, 1, decr_every_n_nan_or_inf=1)
            train = tf.contrib.mixed_precision.LossScaleOptimizer(_sgd(), mgr).minimize(w * 2.0)
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            assert sess.run(mgr.get_loss_scale()) == 16.0     # one finite step, incr_every_n 1
    assert "tf.contrib.mixed_precision.LossScaleOptimizer" in policy.__doc__
    texts = [policy.__doc__, policy.LossScaleManager.__doc__]
    # the README and every documentation page (the README's usage text moved to docs/)
    pages = [os.path.join(ROOT, "README.md")] + [
        os.path.join(folder, name) for folder, _, names in os.walk(os.path.join(ROOT, "docs"))
        for name in names if name.endswith(".md")]
    for page in pages:
        with open(page, encoding="utf-8") as handle:
            texts.append(handle.read())
    for text in texts:
        assert "can be handed to TensorFlow's own" not in text
        assert "also works with" not in text
    assert "never updates a manager" in policy.__doc__


def test_inf_nan_backend_under_emulated_saturation_says_it_cannot_see_the_overflow(graph):
    OverflowInvisibleWarning = optimizer_module.OverflowInvisibleWarning  # pylint: disable=invalid-name
    w = tf.compat.v1.get_variable("w", initializer=1.0)
    loss = tf.reduce_sum(tf.cast(nls.saturate(tf.cast(w * 1e6, tf.float16)), tf.float32))
    opt = nls.NPULossScaleOptimizer(_sgd(), nls.FixedLossScaleManager(4), backend="inf_nan")
    with pytest.warns(OverflowInvisibleWarning, match="backend='inf_nan' cannot see"):
        opt.minimize(loss)
    emulation.set_device_sat_mode(emulation.INF_NAN)     # IEEE arithmetic: nothing to say
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=1.0)
        loss = tf.reduce_sum(tf.cast(nls.saturate(tf.cast(w, tf.float16)), tf.float32))
        import warnings  # pylint: disable=import-outside-toplevel
        with warnings.catch_warnings():
            warnings.simplefilter("error", OverflowInvisibleWarning)
            nls.NPULossScaleOptimizer(_sgd(), nls.FixedLossScaleManager(4),
                                      backend="inf_nan").minimize(loss)


def test_an_exception_in_compute_gradients_leaves_nothing_behind(graph, session):
    w = tf.compat.v1.get_variable("w", initializer=1.0)
    opt = nls.NPULossScaleOptimizer(_sgd(), nls.FixedLossScaleManager(4))
    with pytest.raises(ValueError):
        opt.compute_gradients(w * 2.0, var_list=[])          # "No variables to optimize"
    boost = tf.compat.v1.placeholder_with_default(1.0, [])
    micro_batch = nls.saturate(tf.cast(w * boost, tf.float16))   # built after the failure
    status = emulation.npu_get_float_status_v2()
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(micro_batch, {boost: 1e6})
    session.run(micro_batch)                                 # a clean run clears nothing
    assert session.run(status)[0] == 1


def test_stuck_warning_and_summaries_read_the_scale_the_step_used_under_a_strategy(graph,
                                                                                   recwarn):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        w = tf.compat.v1.get_variable("w", initializer=1.0)
        poison = tf.compat.v1.placeholder_with_default(1.0, [])
        mgr = nls.ExponentialUpdateLossScaleManager(2.0, 1000, decr_every_n_nan_or_inf=1,
                                                    decr_ratio=0.5)
        opt = nls.NPULossScaleOptimizer(_sgd(), mgr, summaries=True)
        train = strategy.group(strategy.extended.call_for_each_replica(
            lambda: opt.minimize(w * poison)))
        summary = tf.compat.v1.summary.merge_all()
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        _, raw = sess.run([train, summary], {poison: np.inf})   # overflow at scale 2 -> 1
        values = {v.tag: v.simple_value for v in tf.compat.v1.Summary.FromString(raw).value}
        assert values["npu_loss_scale/loss_scale"] == 2.0
        assert sess.run(mgr.get_loss_scale()) == 1.0
        assert stuck(recwarn) == []                     # 2 could still go lower
        sess.run(train, {poison: np.inf})
        assert [m for m in stuck(recwarn) if "at loss scale 1 " in m]   # the scale it used


class _NoSecondRun:
    def run(self, *args, **kwargs):
        raise AssertionError("LossScaleHook.after_run must not call session.run")


class _RunContext:
    session = _NoSecondRun()


class _RunValues:
    def __init__(self, results):
        self.results = results


def test_loss_scale_hook_reports_each_step_without_a_second_session_run(graph):
    w = tf.compat.v1.get_variable("w", initializer=1.0)
    x = tf.compat.v1.placeholder_with_default(1.0, [])
    gs = tf.compat.v1.train.get_or_create_global_step()
    mgr = nls.ExponentialUpdateLossScaleManager(8.0, 1000, decr_every_n_nan_or_inf=1,
                                                decr_ratio=0.5)
    opt = nls.NPULossScaleOptimizer(_sgd(), mgr)
    train = opt.minimize(w * x, global_step=gs)
    hook = LossScaleHook(optimizer=opt, every_n_steps=1, log_fn=lambda _: None)
    hook.begin()
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        hook.after_create_session(sess, None)
        for value in (np.inf, 1.0):
            fetches = hook.before_run(None).fetches
            results = sess.run([train, fetches], {x: value})[1]
            hook.after_run(_RunContext(), _RunValues(results))
    assert [(h["loss_scale"], h["overflow"], h["skipped_steps"], h["global_step"])
            for h in hook.history] == [(8.0, True, 1, 0), (4.0, False, 1, 1)]
    assert hook._last_scale == 4.0  # pylint: disable=protected-access
