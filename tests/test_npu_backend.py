"""The `npu` backend end to end, against a stand-in npu_bridge whose ops are the emulated ones.

The stand-in (tests/stand_in/, put on sys.path only by the `stand_in` fixture) has the adapter's
layout: status ops from npu_bridge.helper.helper.get_gen_ops(), modes from
npu_bridge.estimator.npu.npu_plugin, HCCL from npu_bridge.hccl.hccl_ops.allreduce. It logs every
op built, so these tests check the order of the real-hardware path, the skip, the mode routing
and the all-reduce — what the device would see.

Model: one float16 matmul whose loss gradient is 1. With loss scale 2**16 the scaled float16
gradient overflows; the "device" (npu_bridge.device.device_op) saturates it to 65504 and sets the
register, so the gradient that comes back, 65504 / 65536, looks finite and harmless.
"""
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation
from graph_walk import ancestors

STAND_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_in")
OVERFLOW_SCALE = 2.0 ** 16
SAFE_SCALE = 1024.0
LR = 0.5
SATURATED_GRAD = 65504.0 / 65536.0


def _drop_stand_in_modules():
    for name in list(sys.modules):
        if name == "npu_bridge" or name.startswith("npu_bridge."):
            del sys.modules[name]


@pytest.fixture
def stand_in(monkeypatch):
    """The stand-in npu_bridge on sys.path and the npu backend selected; removed afterwards."""
    _drop_stand_in_modules()
    monkeypatch.syspath_prepend(STAND_IN)
    monkeypatch.setenv(detection.ENV_VAR, "npu")
    import npu_bridge  # pylint: disable=import-outside-toplevel
    assert os.path.dirname(npu_bridge.__file__).startswith(STAND_IN)
    npu_bridge.reset()
    yield npu_bridge
    npu_bridge.reset()
    _drop_stand_in_modules()




def _build(manager, is_distributed=False, agreement=None):
    from npu_bridge.device import device_op  # pylint: disable=import-outside-toplevel
    w = tf.compat.v1.get_variable("w", initializer=tf.ones([2, 1]), use_resource=True)
    x = tf.ones([1, 2], tf.float16)
    h = device_op(tf.matmul(x, tf.cast(w, tf.float16)))
    loss = tf.reduce_sum(tf.cast(h, tf.float32))
    step = tf.compat.v1.train.get_or_create_global_step()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR), manager,
                                    is_distributed=is_distributed, agreement=agreement)
    grads_and_vars = opt.compute_gradients(loss, [w])
    train_op = opt.apply_gradients(grads_and_vars, global_step=step)
    return {"w": w, "step": step, "opt": opt, "grads": [g for g, _ in grads_and_vars],
            "train_op": train_op}


def _run_step(session, model):
    session.run(tf.compat.v1.global_variables_initializer())
    grads = session.run(model["grads"])
    session.run(model["train_op"])
    return grads, session.run(model["w"]).ravel(), int(session.run(model["step"]))


def test_backend_is_chosen_automatically_when_npu_bridge_imports(stand_in, monkeypatch):
    monkeypatch.delenv(detection.ENV_VAR)
    assert detection.npu_bridge_available()
    assert nls.get_backend_name() == "npu"
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                    nls.FixedLossScaleManager(8))
    assert opt.backend_name == "npu"


def test_status_is_read_after_every_gradient_and_cleared_after_the_read(stand_in, graph):
    model = _build(nls.FixedLossScaleManager(OVERFLOW_SCALE))
    status_ops = [entry for entry in stand_in.LOG if entry[0].startswith("npu_")]
    assert [name for name, _ in status_ops] == [
        "npu_get_float_status_v2",     # read (nothing is cleared before: the register is sticky)
        "npu_clear_float_status_v2"]   # ... then clear
    get, end = [op for _, op in status_ops]
    before_get = ancestors([get])
    for g in model["grads"]:
        assert g.op in before_get
    assert get in ancestors([end])
    assert get in ancestors([model["opt"].overflow_status_reduce_all])
    assert end in ancestors([model["train_op"]])


def test_overflowed_step_is_skipped_although_its_gradients_look_finite(stand_in, graph, session):
    model = _build(nls.FixedLossScaleManager(OVERFLOW_SCALE))
    grads, w, step = _run_step(session, model)
    np.testing.assert_array_equal(grads[0].ravel(), [SATURATED_GRAD, SATURATED_GRAD])
    np.testing.assert_array_equal(w, [1.0, 1.0])
    assert step == 0
    assert session.run(model["opt"].skipped_steps) == 1
    # the register was read, then cleared: nothing is left for the next step
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()), [0] * 8)


def test_finite_step_is_applied(stand_in, graph, session):
    model = _build(nls.FixedLossScaleManager(SAFE_SCALE))
    grads, w, step = _run_step(session, model)
    np.testing.assert_array_equal(grads[0].ravel(), [1.0, 1.0])
    np.testing.assert_array_equal(w, [1.0 - LR, 1.0 - LR])
    assert step == 1
    assert session.run(model["opt"].skipped_steps) == 0


def test_an_evaluation_overflow_is_kept_until_the_evaluation_clears_it(stand_in, graph,
                                                                       session):
    model = _build(nls.FixedLossScaleManager(SAFE_SCALE))
    from npu_bridge.device import device_op  # pylint: disable=import-outside-toplevel
    evaluation = device_op(tf.cast([1e5], tf.float16))  # an eval run that overflows
    clear = nls.clear_overflow_status(after=[evaluation])
    assert stand_in.logged("npu_clear_float_status_v2")[-1][1] in ancestors([clear])
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(evaluation)
    assert session.run(emulation.npu_get_float_status_v2()).any()
    session.run(model["train_op"])                     # sticky, as on the device: skipped
    np.testing.assert_array_equal(session.run(model["w"]).ravel(), [1.0, 1.0])
    session.run([evaluation, clear])
    session.run(model["train_op"])
    np.testing.assert_array_equal(session.run(model["w"]).ravel(), [1.0 - LR, 1.0 - LR])


def test_mode_functions_go_to_npu_plugin(stand_in):
    from npu_bridge.estimator.npu import npu_plugin  # pylint: disable=import-outside-toplevel
    assert nls.set_device_sat_mode(1) == 0
    assert ("set_device_sat_mode", 1) in stand_in.LOG
    assert npu_plugin.is_inf_nan_enabled()
    assert nls.is_inf_nan_enabled() and nls.get_device_sat_mode() == 1
    npu_plugin.set_device_sat_mode(0)  # the device's setting is what counts
    assert not nls.is_inf_nan_enabled() and nls.get_device_sat_mode() == 0


def test_saturate_leaves_values_alone_on_the_device(stand_in, graph, session):
    x = tf.constant([np.inf, -np.inf, 1.0], tf.float16)
    np.testing.assert_array_equal(session.run(nls.saturate(x)), [np.inf, -np.inf, 1.0])
    np.testing.assert_array_equal(session.run(emulation.npu_get_float_status_v2()), [0] * 8)


def test_inf_nan_mode_skips_on_non_finite_gradients(stand_in, graph, session):
    nls.set_device_sat_mode(1)
    model = _build(nls.FixedLossScaleManager(OVERFLOW_SCALE))
    grads, w, step = _run_step(session, model)
    assert np.isinf(grads[0]).all()
    np.testing.assert_array_equal(w, [1.0, 1.0])
    assert step == 0


def test_inf_nan_mode_does_not_consult_the_register(stand_in, graph, session):
    """On INF/NaN devices legitimate infs (masks) may set the register: finite gradients apply."""
    nls.set_device_sat_mode(1)
    model = _build(nls.FixedLossScaleManager(SAFE_SCALE))
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(emulation.record(True))
    session.run(model["train_op"])
    np.testing.assert_array_equal(session.run(model["w"]).ravel(), [1.0 - LR, 1.0 - LR])
    assert not [entry for entry in stand_in.LOG if entry[0] == "npu_get_float_status_v2"]


@pytest.mark.parametrize("mode", [0, 1], ids=["saturation", "inf_nan"])
def test_is_distributed_all_reduces_the_status_in_both_modes(stand_in, graph, session, mode):
    nls.set_device_sat_mode(mode)
    stand_in.hccl.hccl_ops.set_other_ranks_status(1.0)  # another rank overflowed
    model = _build(nls.FixedLossScaleManager(SAFE_SCALE), is_distributed=True)
    reduces = stand_in.logged("allreduce")
    assert len(reduces) == 1 and reduces[0][2]["fusion"] == 0
    assert reduces[0][1] in ancestors([model["opt"].overflow_status_reduce_all])
    if mode == 0:   # the register is read after every gradient
        for g in model["grads"]:
            assert g.op in ancestors([reduces[0][2]["input"]])
    _, w, step = _run_step(session, model)
    np.testing.assert_array_equal(w, [1.0, 1.0])  # locally finite, skipped with the others
    assert step == 0


@pytest.mark.parametrize("mode", [0, 1], ids=["saturation", "inf_nan"])
def test_no_overflow_check_reads_no_status_and_applies_in_both_modes(stand_in, graph, session,
                                                                      mode):
    nls.set_device_sat_mode(mode)
    model = _build(nls.FixedLossScaleManager(OVERFLOW_SCALE, enable_overflow_check=False))
    assert not [entry for entry in stand_in.LOG if entry[0].startswith("npu_")]
    _, w, step = _run_step(session, model)
    assert step == 1
    if mode == 0:
        np.testing.assert_array_equal(w, [1.0 - LR * SATURATED_GRAD] * 2)
    else:
        assert not np.isfinite(w).any()


def test_the_npu_backend_makes_no_pass_over_gradient_values(stand_in, graph):
    model = _build(nls.FixedLossScaleManager(OVERFLOW_SCALE))
    finite = model["opt"].overflow_status_reduce_all
    forward = ancestors([model["grads"][0].graph.get_tensor_by_name("Sum:0")])  # the loss
    reductions = [op for op in ancestors([finite]) if op.type in ("Sum", "All", "Max", "IsFinite")
                  and op.inputs[0].shape.num_elements() != 8 and op not in forward]
    assert not reductions, reductions


def test_no_clear_runs_before_the_gradients(stand_in, graph):
    model = _build(nls.FixedLossScaleManager(OVERFLOW_SCALE))
    clears = [op for _, op in stand_in.logged("npu_clear_float_status_v2")]
    get = stand_in.logged("npu_get_float_status_v2")[0][1]
    assert len(clears) == 1 and get in ancestors(clears)
    assert clears[0] in ancestors([model["train_op"]])
