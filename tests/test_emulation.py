"""The emulated Ascend float-status register, saturation arithmetic, modes and step boundaries."""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from tf_versions import tf2_only
from npu_loss_scale.device import register as emulation
from graph_walk import ancestors

F16_MAX = 65504.0
F32_MAX = float(np.finfo(np.float32).max)
ZEROS = [0] * 8
OVERFLOW_ONLY = [1, 0, 0, 0, 0, 0, 0, 0]
OVERFLOW_AND_NAN = [1, 1, 0, 0, 0, 0, 0, 0]


def _f16(values):
    """A float16 tensor holding what a CPU computes for ``values`` (1e5 -> inf)."""
    return tf.cast(tf.constant(values, tf.float32), tf.float16)




# -- register ------------------------------------------------------------------------------------
def test_register_reads_eight_int32_zeros_without_any_initializer(graph, session):
    status = emulation.npu_get_float_status_v2()
    assert status.dtype == tf.int32 and status.shape.as_list() == [8]
    np.testing.assert_array_equal(session.run(status), ZEROS)


def test_register_is_sticky_until_cleared(graph, session):
    read = emulation.npu_get_float_status_v2()
    session.run(emulation.record(True))
    np.testing.assert_array_equal(session.run(read), OVERFLOW_ONLY)
    session.run(emulation.record(False, nan_seen=True))
    np.testing.assert_array_equal(session.run(read), OVERFLOW_AND_NAN)
    session.run(emulation.record(False, nan_seen=False))  # a clean write clears nothing
    np.testing.assert_array_equal(session.run(read), OVERFLOW_AND_NAN)
    session.run(emulation.npu_clear_float_status_v2())
    np.testing.assert_array_equal(session.run(read), ZEROS)


def test_each_graph_has_its_own_register():
    first, second = tf.Graph(), tf.Graph()
    with first.as_default():
        set_first = emulation.record(True)
        read_first = emulation.npu_get_float_status_v2()
    with second.as_default():
        read_second = emulation.npu_get_float_status_v2()
    with tf.compat.v1.Session(graph=first) as sess:
        sess.run(set_first)
        np.testing.assert_array_equal(sess.run(read_first), OVERFLOW_ONLY)
    with tf.compat.v1.Session(graph=second) as sess:
        np.testing.assert_array_equal(sess.run(read_second), ZEROS)


def test_register_is_not_saved_in_checkpoints(graph, session, tmp_path):
    session.run(emulation.record(True))
    v = tf.compat.v1.get_variable("v", initializer=1.0)
    session.run(v.initializer)
    path = tf.compat.v1.train.Saver().save(session, str(tmp_path / "ckpt"))
    assert [name for name, _ in tf.train.list_variables(path)] == ["v"]


def test_v1_protocol_alloc_get_clear(graph, session):
    buffer = emulation.npu_alloc_float_status()
    assert buffer.dtype == tf.float32 and buffer.shape.as_list() == [8]
    np.testing.assert_array_equal(session.run(buffer), [0.0] * 8)
    session.run(emulation.record(True))
    got = emulation.npu_get_float_status(buffer)
    assert got.dtype == tf.float32
    np.testing.assert_array_equal(session.run(got), [1.0, 0, 0, 0, 0, 0, 0, 0])
    cleared = emulation.npu_clear_float_status(got)
    np.testing.assert_array_equal(session.run(cleared), [0.0] * 8)
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()), ZEROS)


def test_v1_protocol_reads_after_its_buffer_and_clears_after_its_input(graph):
    buffer = emulation.npu_alloc_float_status()
    got = emulation.npu_get_float_status(buffer)
    lookups = [op for op in ancestors([got]) if op.type == "LookupTableFindV2"]
    assert lookups and all(buffer.op in ancestors([op]) for op in lookups)
    cleared = emulation.npu_clear_float_status(got)
    inserts = [op for op in ancestors([cleared]) if op.type == "LookupTableInsertV2"]
    assert inserts and all(got.op in ancestors([op]) for op in inserts)


# -- saturation arithmetic -----------------------------------------------------------------------
def test_saturate_float16_overflow_becomes_max_and_nan_becomes_zero(graph, session):
    y = nls.saturate(_f16([1e5, -1e5, float("nan"), 3.0, F16_MAX, -0.5]))
    assert y.dtype == tf.float16
    np.testing.assert_array_equal(session.run(y), [F16_MAX, -F16_MAX, 0.0, 3.0, F16_MAX, -0.5])
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()),
                                  OVERFLOW_AND_NAN)


def test_saturate_float32_overflow_becomes_float32_max(graph, session):
    y = nls.saturate(tf.constant([np.inf, -np.inf, 1.0], tf.float32))
    np.testing.assert_array_equal(session.run(y), np.array([F32_MAX, -F32_MAX, 1.0], np.float32))
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()), OVERFLOW_ONLY)


def test_saturate_leaves_in_range_values_and_the_register_alone(graph, session):
    y = nls.saturate(_f16([F16_MAX, -F16_MAX, 0.0, 1e-7]))
    np.testing.assert_array_equal(session.run(y),
                                  np.array([F16_MAX, -F16_MAX, 0.0, 1e-7], np.float16))
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()), ZEROS)


def test_saturate_saturates_the_gradient_flowing_back_and_records_it(graph, session):
    x = _f16([1.0, 2.0])
    y = nls.saturate(x)
    grad = tf.gradients(y, x, grad_ys=_f16([1e5, float("nan")]))[0]
    np.testing.assert_array_equal(session.run(y), [1.0, 2.0])
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()), ZEROS)
    np.testing.assert_array_equal(session.run(grad), [F16_MAX, 0.0])
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()),
                                  OVERFLOW_AND_NAN)


def test_saturate_passes_a_finite_gradient_through_unchanged(graph, session):
    x = _f16([1e5, 2.0])  # the forward value saturates, the gradient is still dy
    grad = tf.gradients(nls.saturate(x), x, grad_ys=_f16([3.0, -4.0]))[0]
    np.testing.assert_array_equal(session.run(grad), [3.0, -4.0])


def test_saturate_refuses_integer_tensors():
    with pytest.raises(TypeError, match="floating-point.*int32"):
        nls.saturate(tf.constant([1, 2]))


@pytest.mark.npu_device(sat_mode="inf_nan")
def test_inf_nan_mode_leaves_ieee_values_and_the_register_alone(npu_device, graph, session):
    assert nls.is_inf_nan_enabled()
    x = _f16([1e5, float("nan"), 1.0])
    y = nls.saturate(x)
    grad = tf.gradients(y, x, grad_ys=_f16([1e5, 1.0, 1.0]))[0]
    values, grads = session.run([y, grad])
    assert np.isposinf(values[0]) and np.isnan(values[1]) and values[2] == 1.0
    assert np.isposinf(grads[0])
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()), ZEROS)


@tf2_only
def test_saturate_in_eager_mode_and_in_tf_function_share_one_register(npu_device):
    assert npu_device.status() == ZEROS
    y = nls.saturate(_f16([1e5, 1.0]))
    np.testing.assert_array_equal(y.numpy(), [F16_MAX, 1.0])
    np.testing.assert_array_equal(emulation.npu_get_float_status_v2().numpy(), OVERFLOW_ONLY)

    @tf.function
    def clear_then_saturate(x):
        emulation.npu_clear_float_status_v2()
        return nls.saturate(x), emulation.npu_get_float_status_v2()

    out, status = clear_then_saturate(_f16([float("nan")]))
    np.testing.assert_array_equal(out.numpy(), [0.0])
    np.testing.assert_array_equal(status.numpy(), [0, 1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(npu_device.status(), [0, 1, 0, 0, 0, 0, 0, 0])


# -- modes ---------------------------------------------------------------------------------------
def test_mode_switch_returns_the_previous_mode():
    assert nls.get_device_sat_mode() == 0 and not nls.is_inf_nan_enabled()
    assert nls.set_device_sat_mode(1) == 0
    assert nls.get_device_sat_mode() == 1 and nls.is_inf_nan_enabled()
    assert nls.set_device_sat_mode(0) == 1


@pytest.mark.parametrize("bad", [2, -1, True, "1", None, 0.5])
def test_mode_switch_rejects_anything_but_0_and_1(bad):
    with pytest.raises(ValueError, match="mode must be 0 .*1 .*got"):
        nls.set_device_sat_mode(bad)


def test_initial_mode_comes_from_the_environment(monkeypatch):
    monkeypatch.setattr(emulation, "_mode", None)
    monkeypatch.setenv(emulation.MODE_ENV_VAR, "1")
    assert nls.get_device_sat_mode() == 1
    monkeypatch.setattr(emulation, "_mode", None)
    monkeypatch.setenv(emulation.MODE_ENV_VAR, "inf_nan")    # by name, as --sat-mode takes it
    assert nls.get_device_sat_mode() == 1
    monkeypatch.setattr(emulation, "_mode", None)
    monkeypatch.setenv(emulation.MODE_ENV_VAR, "saturate")
    with pytest.raises(ValueError, match="NPU_LOSS_SCALE_SAT_MODE must be 0 or saturation, 1 or "
                                         "inf_nan; got 'saturate'"):
        nls.get_device_sat_mode()
    monkeypatch.setattr(emulation, "_mode", None)
    monkeypatch.delenv(emulation.MODE_ENV_VAR)
    assert nls.get_device_sat_mode() == 0


# -- training steps with the emulation backend ---------------------------------------------------
LR = 0.5


def _train_graph(forward_overflow=False, scale=1024.0):
    """w: [2,1] ones; loss = sum(saturate(x @ w) * k) in float16; one NPULossScaleOptimizer step."""
    w = tf.compat.v1.get_variable("w", initializer=tf.ones([2, 1]), use_resource=True)
    x = tf.ones([1, 2], tf.float16)
    h = nls.saturate(tf.matmul(x, tf.cast(w, tf.float16)))
    k = tf.constant(40000.0 if forward_overflow else 1.0, tf.float16)
    out = nls.saturate(h * k)  # 2 * 40000 overflows float16 in the forward pass
    loss = tf.reduce_sum(tf.cast(out, tf.float32))
    step = tf.compat.v1.train.get_or_create_global_step()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                    nls.FixedLossScaleManager(scale), backend="emulation")
    grads_and_vars = opt.compute_gradients(loss, [w])
    train_op = opt.apply_gradients(grads_and_vars, global_step=step)
    return w, step, opt, grads_and_vars, train_op


def test_overflow_of_an_earlier_evaluation_run_sticks_until_cleared(graph, session):
    w, step, _, _, train_op = _train_graph()
    evaluation = nls.saturate(_f16([1e5]))  # built after the train op, in the same graph
    clear = nls.clear_overflow_status(after=[evaluation])
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(evaluation)
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()), OVERFLOW_ONLY)
    session.run(train_op)                     # the device would skip this step: so do we
    np.testing.assert_array_equal(session.run(w).ravel(), [1.0, 1.0])
    session.run([evaluation, clear])          # an evaluation that clears after itself
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()), ZEROS)
    session.run(train_op)
    np.testing.assert_array_equal(session.run(w).ravel(), [1.0 - 1.0 * LR] * 2)
    assert session.run(step) == 1


def test_overflow_in_the_steps_own_forward_pass_makes_it_skip(graph, session):
    w, step, opt, grads_and_vars, train_op = _train_graph(forward_overflow=True)
    session.run(tf.compat.v1.global_variables_initializer())
    grads = session.run([g for g, _ in grads_and_vars])
    assert all(np.isfinite(g).all() for g in grads)  # the saturated forward pass looks fine
    session.run(train_op)
    np.testing.assert_array_equal(session.run(w).ravel(), [1.0, 1.0])
    assert session.run(step) == 0 and session.run(opt.skipped_steps) == 1


def test_status_is_read_after_every_gradient(graph):
    _, _, opt, grads_and_vars, _ = _train_graph()
    reads = [op for op in ancestors([opt.overflow_status_reduce_all])
             if op.type == "LookupTableFindV2" and "skipped_steps" not in op.name]
    assert len(reads) == 1
    before_read = ancestors(reads)
    for g, _ in grads_and_vars:
        assert g.op in before_read


def test_nothing_clears_the_register_before_the_read(graph):
    _, _, opt, _, train_op = _train_graph()
    inserts = [op for op in ancestors([train_op]) if op.type == "LookupTableInsertV2"
               and "record" not in op.name and "skipped_steps" not in op.name]
    read = [op for op in ancestors([opt.overflow_status_reduce_all])
            if op.type == "LookupTableFindV2" and "skipped_steps" not in op.name]
    assert len(inserts) == 1                          # the one clear, of what was read ...
    assert read[0] in ancestors(inserts)              # ... after the read


@pytest.mark.parametrize("npu_device", ["saturation", "inf_nan"], indirect=True)
def test_no_overflow_check_builds_no_status_ops_in_both_modes(npu_device, graph, session):
    assert nls.get_device_sat_mode() == {"saturation": 0, "inf_nan": 1}[npu_device.sat_mode]
    w = tf.compat.v1.get_variable("w", initializer=tf.ones([1]), use_resource=True)
    loss = tf.reduce_sum(w * 3.0)
    opt = nls.NPULossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR),
        nls.FixedLossScaleManager(8, enable_overflow_check=False), backend="emulation")
    train_op = opt.minimize(loss)
    assert not [op for op in graph.get_operations() if op.type.startswith("LookupTable")
                and "skipped_steps" not in op.name]      # the skipped-step counter is a table too
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(train_op)
    np.testing.assert_allclose(session.run(w), [1.0 - 3.0 * LR])


@pytest.mark.npu_device(sat_mode="inf_nan")
def test_inf_nan_mode_decides_on_non_finite_gradients(npu_device, graph, session):
    assert nls.is_inf_nan_enabled()
    w, step, _, _, train_op = _train_graph(scale=2.0 ** 17)  # the scaled gradient is inf
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(emulation.record(True))  # a set register is not consulted in INF/NaN mode
    session.run(train_op)
    np.testing.assert_array_equal(session.run(w).ravel(), [1.0, 1.0])
    assert session.run(step) == 0


def test_each_local_replica_of_a_strategy_has_its_own_register(graph):
    """As each device has its own register: replica 1's overflow is invisible to replica 0."""
    strategy = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def replica_fn(x):
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        boost = tf.cast(tf.where(tf.equal(replica, 1), 1e5, 1.0), tf.float16)
        with tf.control_dependencies([nls.saturate(x * boost)]):
            return emulation.npu_get_float_status_v2()

    with strategy.scope():
        per_replica = strategy.extended.call_for_each_replica(
            replica_fn, args=(tf.ones([1], tf.float16),))
        statuses = strategy.experimental_local_results(per_replica)
    assert len([op for op in graph.get_operations() if op.type == "MutableHashTableV2"]) == 2
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        first, second = sess.run(statuses)
    np.testing.assert_array_equal(first, ZEROS)
    np.testing.assert_array_equal(second, OVERFLOW_ONLY)
