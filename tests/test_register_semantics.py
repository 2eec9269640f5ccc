"""Never lose an overflow: Ascend's register semantics under the training patterns of real scripts.

Each test states a behaviour the device has; the patterns come from Ascend ModelZoo scripts:
accumulation across session.run calls, overflow inside cond/while bodies, tf.function and eager,
apply_gradients inside tf.cond, two optimizers in one train op (GANs), the absl.app.run script
shape, and graphs that must not be kept alive.
"""
import gc
import os
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from tf_versions import control_flow, tf2_only
from npu_loss_scale.device import register as emulation

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BIG = 1e6          # float16 overflow (for |w| >= 0.07): saturates to 65504, sets the register


def _saturating_loss(w, boost):
    """loss = saturate(float16(w) * boost): finite-looking after an overflow."""
    h = nls.saturate(tf.cast(w * boost, tf.float16))
    return tf.reduce_sum(tf.cast(h, tf.float32))


# -- 1. accumulation across session.run calls -----------------------------------------------------
def test_an_overflow_of_an_earlier_micro_batch_makes_the_accumulated_step_skip(graph, session):
    w = tf.compat.v1.get_variable("w", initializer=1.0)
    boost = tf.compat.v1.placeholder(tf.float32, [])
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                    nls.FixedLossScaleManager(1024))
    (grad, _), = opt.compute_gradients(_saturating_loss(w, boost), [w])
    acc = tf.compat.v1.get_variable("acc", initializer=0.0, trainable=False)
    accumulate = acc.assign_add(grad)
    apply = opt.apply_gradients([(acc, w)])
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(accumulate, {boost: BIG})      # micro-batch 1 overflows (looks finite)
    session.run(accumulate, {boost: 1.0})      # micro-batch 2 is clean
    assert np.isfinite(session.run(acc))
    session.run(apply)
    assert session.run(w) == 1.0               # skipped, as on the device
    assert session.run(opt.skipped_steps) == 1


# -- 2. overflow inside control-flow bodies -------------------------------------------------------
def _cond_model(kind):
    w = tf.compat.v1.get_variable("w", initializer=1.0, use_resource=True)
    boost = tf.compat.v1.placeholder_with_default(1.0, [])
    pred = tf.compat.v1.placeholder_with_default(True, [])
    if kind == "cond":
        loss = tf.cond(pred, lambda: _saturating_loss(w, boost), lambda: w * 2.0)
    else:
        def body(i, total):
            return i + 1, total + _saturating_loss(w, boost)
        _, loss = tf.while_loop(lambda i, _: i < 2, body, [0, tf.constant(0.0)])
    return w, boost, pred, loss


@pytest.mark.parametrize("v1", [False, True], ids=["v2_control_flow", "v1_control_flow"])
@pytest.mark.parametrize("kind", ["cond", "while"])
def test_an_overflow_inside_a_cond_or_while_body_makes_every_such_step_skip(kind, v1):
    with control_flow(v2=not v1):
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            w, boost, pred, loss = _cond_model(kind)
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01),
                                            nls.FixedLossScaleManager(8))
            train = opt.minimize(loss)
            sess.run(tf.compat.v1.global_variables_initializer())
            overflowing = [i % 3 == 1 for i in range(12)]
            applied = 0
            for bad in overflowing:
                before = sess.run(w)
                sess.run(train, {boost: BIG if bad else 1.0})
                changed = sess.run(w) != before
                assert changed == (not bad)
                applied += changed
            assert sess.run(opt.skipped_steps) == sum(overflowing)
            if kind == "cond":           # the untaken branch's saturate does not kill the step
                before = sess.run(w)
                sess.run(train, {pred: False})
                assert sess.run(w) == np.float32(before - np.float32(0.01) * 2.0)


# -- 3. tf.function, eager, apply_gradients inside tf.cond ------------------------------------------
@pytest.mark.parametrize("make_manager", [
    lambda: nls.ExponentialUpdateLossScaleManager(1024, 100, decr_every_n_nan_or_inf=1,
                                                  decr_ratio=0.5),
    lambda: nls.FixedLossScaleManager(1024)], ids=["exponential", "fixed"])
@tf2_only
def test_tf_function_creates_state_once_and_skips_overflowed_steps(make_manager):
    w = tf.Variable(1.0)
    mgr = make_manager()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), mgr)

    @tf.function
    def step(boost):
        opt.minimize(lambda: _saturating_loss(w, boost), var_list=[w])

    step(tf.constant(1.0))
    assert w.numpy() == 0.5
    step(tf.constant(BIG))
    assert w.numpy() == 0.5 and int(opt.skipped_steps.numpy()) == 1
    step(tf.constant(2.0))                     # a retrace: no new variables
    assert w.numpy() == 0.5 - 0.5 * 2.0
    assert float(mgr.get_loss_scale().numpy()) == (512.0 if hasattr(mgr, "variables")
                                                  else 1024.0)
    assert int(opt.skipped_steps.numpy()) == 1


@tf2_only
def test_eager_minimize_skips_overflowed_steps():
    w = tf.Variable(1.0)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                    nls.FixedLossScaleManager(1024))
    opt.minimize(lambda: _saturating_loss(w, BIG), var_list=[w])
    assert w.numpy() == 1.0 and int(opt.skipped_steps.numpy()) == 1
    opt.minimize(lambda: _saturating_loss(w, 1.0), var_list=[w])
    assert w.numpy() == 0.5


def test_apply_gradients_inside_tf_cond_counts_into_the_optimizers_skipped_steps(graph, session):
    w = tf.compat.v1.get_variable("w", initializer=1.0)
    boost = tf.compat.v1.placeholder_with_default(1.0, [])
    now = tf.compat.v1.placeholder_with_default(True, [])
    mgr = nls.ExponentialUpdateLossScaleManager(1024, 100, decr_every_n_nan_or_inf=1,
                                                decr_ratio=0.5)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), mgr)
    grads = opt.compute_gradients(_saturating_loss(w, boost), [w])
    train = tf.cond(now, lambda: opt.apply_gradients(grads), tf.no_op)
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(train, {boost: BIG})
    assert session.run([w, opt.skipped_steps, "loss_scale:0"]) == [1.0, 1, 512.0]
    session.run(train)
    assert session.run(w) == 0.5
    assert len([op for op in graph.get_operations() if op.type == "MutableHashTableV2"
                and "skipped_steps" in op.name]) == 1      # one counter, no hidden second one


# -- 4. two optimizers in one train op (a GAN) --------------------------------------------------------
@pytest.mark.parametrize("shared", [False, True], ids=["own_managers", "shared_manager"])
def test_two_optimizers_in_one_train_op_each_see_every_overflow(graph, session, shared):
    d = tf.compat.v1.get_variable("d", initializer=1.0)
    g = tf.compat.v1.get_variable("g", initializer=1.0)
    boost = tf.compat.v1.placeholder_with_default(1.0, [])

    def manager():
        return nls.ExponentialUpdateLossScaleManager(2.0 ** 12, 1000, decr_every_n_nan_or_inf=1,
                                                     decr_ratio=0.5)
    m_d = manager()
    m_g = m_d if shared else manager()
    opt_d = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), m_d)
    opt_g = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), m_g)
    fake = nls.saturate(tf.cast(g * boost, tf.float16))   # the generator's output overflows
    g_loss = tf.reduce_sum(tf.cast(fake, tf.float32))
    d_loss = d * 3.0 * tf.stop_gradient(tf.cast(fake, tf.float32))   # D judges the fake
    train = tf.group(opt_d.minimize(d_loss, var_list=[d]), opt_g.minimize(g_loss, var_list=[g]))
    session.run(tf.compat.v1.global_variables_initializer())
    for _ in range(4):
        session.run(train, {boost: BIG})
    # each optimizer saw the overflow of the forward pass feeding its loss
    assert session.run([d, g, opt_d.skipped_steps, opt_g.skipped_steps]) == [1.0, 1.0, 4, 4]
    if shared:   # moved once per apply_gradients: twice per step, never a lost update
        assert session.run(m_d.get_loss_scale()) == 2.0 ** 12 / 2 ** 8
    else:
        assert session.run([m_d.get_loss_scale(), m_g.get_loss_scale()]) == [2.0 ** 8] * 2
    session.run(train)
    assert session.run([d, g]) == [1.0 - 0.5 * 3.0, 0.5]


# -- 5. the absl.app.run + disable_eager_execution script shape -----------------------------------------
ABSL_SCRIPT = textwrap.dedent("""
    from absl import app
    import tensorflow as tf
    import npu_loss_scale as nls

    def main(_):
        tf.compat.v1.disable_eager_execution()
        w = tf.compat.v1.get_variable("w", initializer=[1.0, 2.0])
        boost = tf.compat.v1.placeholder_with_default(1.0, [])
        h = nls.saturate(tf.cast(w * boost, tf.float16))
        loss = tf.reduce_sum(tf.cast(h, tf.float32))
        mgr = nls.ExponentialUpdateLossScaleManager(2 ** 10, 1000, decr_every_n_nan_or_inf=1,
                                                    decr_ratio=0.5)
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.MomentumOptimizer(0.1, 0.9), mgr,
                                        accumulation_steps=ACCUMULATION)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(ACCUMULATION):
                sess.run(train, {boost: 1e5})
            for _ in range(ACCUMULATION):
                sess.run(train)
            step, skipped, scale = sess.run([gs, opt.skipped_steps, "loss_scale:0"])
            print("RESULT", [int(step), int(skipped), float(scale)], sess.run(w))

    app.run(main)
""")


@pytest.mark.slow
@pytest.mark.parametrize("accumulation", [1, 2])
def test_absl_script_with_eager_turned_off_in_main_and_momentum_builds_and_trains(tmp_path,
                                                                                  accumulation):
    script = tmp_path / "script.py"
    script.write_text(ABSL_SCRIPT.replace("ACCUMULATION", str(accumulation)))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2", NPU_LOSS_SCALE_BACKEND="emulation")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT")][0]
    assert line.startswith("RESULT [1, 1, 512.0]"), line
    assert "[0.9 1.9]" in line          # one Momentum step with grads [1, 1] at lr 0.1


# -- no graph kept alive ---------------------------------------------------------------------------------
def test_optimizer_manager_and_saturate_keep_no_graph_alive():
    mgr = nls.ExponentialUpdateLossScaleManager(1024, 10)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), mgr)
    refs = []
    for _ in range(3):
        graph = tf.Graph()
        with graph.as_default():
            w = tf.compat.v1.get_variable("w", initializer=1.0)
            opt.minimize(_saturating_loss(w, 2.0))
            tf.cond(tf.constant(True), lambda: nls.saturate(tf.constant(1.0)),
                    lambda: tf.constant(0.0))
            assert opt.skipped_steps is not None and mgr.get_loss_scale() is not None
        refs.append(weakref.ref(graph))
        del graph, w
    gc.collect()
    # TensorFlow's own SGD keeps its learning-rate tensor of the last graph it built in.
    assert [r() for r in refs[:-1]] == [None, None]
    del opt
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert mgr.get_config()   # the manager is alive and keeps none of them


def test_saturate_registers_one_gradient_function_whatever_the_number_of_calls(graph):
    from tensorflow.python.framework import ops  # pylint: disable=import-outside-toplevel
    registry = ops._gradient_registry._registry  # pylint: disable=protected-access
    nls.saturate(tf.constant(1.0))
    before = len(registry)
    for _ in range(20):
        y = nls.saturate(tf.constant([1.0, 2.0]))
    assert len(registry) == before
    dy = tf.gradients(y * tf.constant(3e38) * 10.0, [y])  # the gradient still saturates
    assert dy


def test_register_is_sticky_across_runs_until_read(graph, session):
    boost = tf.compat.v1.placeholder_with_default(1.0, [])
    h = nls.saturate(tf.cast(boost, tf.float16) * tf.constant(1.0, tf.float16))
    status = emulation.npu_get_float_status_v2()
    session.run(h, {boost: BIG})
    for _ in range(3):
        session.run(h)
        assert session.run(status)[0] == 1


@tf2_only
def test_a_function_run_by_a_strategy_replica_thread_records_into_the_eager_register():
    # MirroredStrategy runs the replica function in a thread of its own, whose global default
    # graph differs from the tracing thread's: the register must still be the eager one, or
    # building the function fails ("defined in <Graph>, which is out of scope").
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    emulation.npu_clear_float_status_v2()

    @tf.function
    def step():
        return strategy.run(lambda: emulation.saturate(tf.constant([4e4], tf.float16) * 2.0))

    np.testing.assert_array_equal(step().numpy(), [65504.0])
    status = emulation.npu_get_float_status_v2().numpy()
    emulation.npu_clear_float_status_v2()
    assert status[0] == 1 and not status[2:].any()
