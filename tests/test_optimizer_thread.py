"""GradScaler with an OptimizerThread: interleavings driven with real threads and Event barriers
(no sleeps, no timing assertions)."""
import threading

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.device import register as emulation

WAIT = 60  # seconds: only a guard against a hang; every wait returns as soon as it is released


def _wait(event):
    assert event.wait(WAIT), "a barrier was never released"


@pytest.fixture
def clean_register():
    emulation.npu_clear_float_status_v2()
    yield
    emulation.npu_clear_float_status_v2()


def _scaled_grad(scaler, var, value):
    """d(scale * value * var)/dvar: the gradient of this iteration's scaled loss."""
    with tf.GradientTape() as tape:
        loss = scaler.scale(tf.reduce_sum(var * value))
    return tape.gradient(loss, [var])[0]


def test_each_step_is_unscaled_with_its_own_scale_and_get_scale_answers_per_thread(
        clean_register):  # pylint: disable=redefined-outer-name,unused-argument
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=8.0, growth_interval=1000)
    gate1, job2_started, gate2 = threading.Event(), threading.Event(), threading.Event()
    seen = {}
    with nls.OptimizerThread(scaler) as worker:
        # iteration 1 overflows; its job waits at gate1 before stepping
        g1 = tf.constant([np.inf])
        scaler.scale(tf.constant(1.0))
        worker.submit(lambda: (_wait(gate1), scaler.step(opt, [(g1, var)])))
        scaler.update()
        # iteration 2 runs on the main thread meanwhile: the backoff has not happened yet
        assert scaler.get_scale() == 8.0
        g2 = _scaled_grad(scaler, var, 1.0)            # scaled with 8
        assert g2.numpy().tolist() == [8.0]

        def job2():
            seen["job2_scale_before"] = scaler.get_scale()
            job2_started.set()
            _wait(gate2)
            return scaler.step(opt, [(g2, var)])

        future2 = worker.submit(job2)
        scaler.update()
        gate1.set()
        _wait(job2_started)
        # job 1 was skipped and its update backed off to 4; job 2 still sees its own 8
        assert seen["job2_scale_before"] == 8.0
        assert scaler.get_scale() == 4.0
        gate2.set()
        future2.result(WAIT)
        worker.synchronize()
    assert var.numpy().tolist() == [-1.0]               # 8 / 8, applied once
    assert scaler.state_dict()["scale"] == 4.0 and scaler.state_dict()["_growth_tracker"] == 1


def test_overflow_while_the_previous_step_is_being_applied_is_blamed_on_its_own_step(
        clean_register):  # pylint: disable=redefined-outer-name,unused-argument
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=4.0, growth_interval=1000)
    applying, gate = threading.Event(), threading.Event()
    with nls.OptimizerThread(scaler) as worker:
        g1 = _scaled_grad(scaler, var, 1.0)

        def job1():
            applying.set()
            _wait(gate)                           # step 1 is "being applied"
            return scaler.step(opt, [(g1, var)])

        worker.submit(job1)
        scaler.update()
        _wait(applying)
        # step 2's forward saturates while step 1 is in flight: the register is set now
        emulation.saturate(tf.constant([1e5], tf.float32) * tf.constant(1e35))
        g2 = _scaled_grad(scaler, var, 1.0)
        worker.submit(lambda: scaler.step(opt, [(g2, var)]))
        scaler.update()
        gate.set()
        worker.synchronize()
    assert var.numpy().tolist() == [-1.0]                # step 1 applied, step 2 skipped
    assert scaler.state_dict()["scale"] == 2.0            # one backoff
    assert scaler.state_dict()["_growth_tracker"] == 0


def test_overflow_at_a_scale_already_backed_off_from_is_not_counted_twice():
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=16.0)
    gate = threading.Event()
    with nls.OptimizerThread(scaler) as worker:
        scaler.scale(tf.constant(1.0))
        worker.submit(lambda: (_wait(gate), scaler.step(opt, [(tf.constant([np.inf]), var)])))
        scaler.update()
        assert scaler.get_scale() == 16.0                  # stale: step 1 not done yet
        scaler.scale(tf.constant(1.0))                     # step 2 also scaled with 16
        worker.submit(lambda: scaler.step(opt, [(tf.constant([np.inf]), var)]))
        scaler.update()
        gate.set()
        worker.synchronize()
        assert scaler.get_scale() == 8.0                   # backed off once, not to 4
    assert var.numpy().tolist() == [0.0]


def test_update_off_the_main_thread_raises_a_clear_error():
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=2.0)
    with nls.OptimizerThread(scaler) as worker:
        future = worker.submit(lambda: (scaler.step(opt, [(tf.constant([2.0]), var)]),
                                        scaler.update()))
        with pytest.raises(RuntimeError, match="update\\(\\) must be called from the main thread"):
            future.result(WAIT)
        with pytest.raises(RuntimeError, match="a job on the optimizer thread failed"):
            worker.synchronize()
        errors = []

        def other_thread():
            try:
                scaler.update()
            except RuntimeError as err:
                errors.append(str(err))

        t = threading.Thread(target=other_thread)
        t.start()
        t.join(WAIT)
        assert errors and "must be called from the main thread" in errors[0]
        scaler.update()                                   # the main thread may
    assert var.numpy().tolist() == [-1.0]


def test_getters_up_to_date_wait_for_the_optimizer_thread():
    scaler = nls.GradScaler(init_scale=2.0, growth_interval=1)
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    gate = threading.Event()
    with nls.OptimizerThread(scaler) as worker:
        scaler.scale(tf.constant(1.0))
        worker.submit(lambda: (_wait(gate), scaler.step(opt, [(tf.constant([2.0]), var)])))
        scaler.update()
        scaler.set_growth_factor(4.0)
        scaler.set_growth_interval(3)
        # the main thread's view at once; the optimizer thread's once it gets there
        assert scaler.get_growth_factor() == 4.0 and scaler.get_growth_interval() == 3
        results = {}
        done = threading.Event()

        def ask():
            results["factor"] = scaler.get_growth_factor(up_to_date=True)
            results["state"] = scaler.state_dict()
            done.set()

        asker = threading.Thread(target=ask)
        asker.start()
        gate.set()
        _wait(done)
        asker.join(WAIT)
    assert results["factor"] == 4.0
    # growth_interval was 1 when update 1 ran (queued before the setters): 2 * 2 = 4
    assert results["state"] == {"scale": 4.0, "growth_factor": 4.0, "backoff_factor": 0.5,
                                "growth_interval": 3, "_growth_tracker": 0}


def test_disabled_scaler_jobs_just_run_and_return_the_optimizer_result():
    scaler = nls.GradScaler(enabled=False)
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(1.0)
    with nls.OptimizerThread(scaler) as worker:
        future = worker.submit(scaler.step, opt, [(tf.constant([1.0]), var)])
        assert int(future.result(WAIT).numpy()) == 1
        assert scaler.get_scale() == 1.0
    assert var.numpy().tolist() == [0.0]


def test_optimizer_thread_needs_a_grad_scaler():
    with pytest.raises(TypeError, match="scaler must be an npu_loss_scale.GradScaler"):
        nls.OptimizerThread(object())


def test_scaler_calls_inside_a_tf_function_are_refused_with_an_optimizer_thread():
    scaler = nls.GradScaler(init_scale=4.0)
    with nls.OptimizerThread(scaler):
        with pytest.raises(RuntimeError, match="call scale\\(\\), unscale_\\(\\) and step\\(\\) "
                                               "eagerly"):
            tf.function(lambda: scaler.scale(tf.constant(1.0)))()


def _saturated_forward(scaler, var):
    """An iteration whose forward pass saturated: the register is set, the gradient is finite."""
    emulation.saturate(tf.constant([1e5], tf.float32) * tf.constant(1e35))
    return _scaled_grad(scaler, var, 1.0)


def test_main_thread_unscale_then_submit_sees_the_register(
        clean_register):  # pylint: disable=redefined-outer-name,unused-argument
    # The GradScaler guide's pattern (unscale_ on the main thread, clip, submit the step): the overflow the
    # register holds must skip the step and back off, as without the thread.
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=4.0, growth_interval=1000, backend="emulation")
    with nls.OptimizerThread(scaler) as worker:
        g = _saturated_forward(scaler, var)
        unscaled = scaler.unscale_(opt, [(g, var)])
        clipped = [(tf.clip_by_norm(gr, 10.0), v) for gr, v in unscaled]
        future = worker.submit(lambda: scaler.step(opt, clipped))
        scaler.update()
        worker.synchronize()
    assert future.result() is None
    assert var.numpy().tolist() == [0.0] and scaler.get_scale() == 2.0


def test_the_register_is_read_once_per_iteration_and_no_overflow_is_lost(
        clean_register):  # pylint: disable=redefined-outer-name,unused-argument
    # An overflow recorded after the iteration's read (between a main-thread unscale_ and
    # submit) stays in the sticky register and is counted by the next iteration.
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=4.0, growth_interval=1000, backend="emulation")
    with nls.OptimizerThread(scaler) as worker:
        g = _scaled_grad(scaler, var, 1.0)
        unscaled = scaler.unscale_(opt, [(g, var)])        # the read: clean
        emulation.saturate(tf.constant([1e5], tf.float32) * tf.constant(1e35))
        worker.submit(lambda: scaler.step(opt, unscaled))  # no second read
        scaler.update()
        worker.synchronize()
        assert var.numpy().tolist() == [-1.0] and scaler.get_scale() == 4.0
        g = _scaled_grad(scaler, var, 1.0)
        worker.submit(lambda: scaler.step(opt, [(g, var)]))
        scaler.update()
        worker.synchronize()
    assert var.numpy().tolist() == [-1.0] and scaler.get_scale() == 2.0


def test_main_thread_step_with_a_thread_attached_is_refused_and_changes_nothing(
        clean_register):  # pylint: disable=redefined-outer-name,unused-argument
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=4.0, growth_interval=1000, backend="emulation")
    with nls.OptimizerThread(scaler) as worker:
        g = _saturated_forward(scaler, var)
        with pytest.raises(RuntimeError, match=r"thread\.submit\(lambda: scaler\.step"):
            scaler.step(opt, [(g, var)])
        assert var.numpy().tolist() == [0.0]
        worker.submit(lambda: scaler.step(opt, [(g, var)]))
        scaler.update()
        worker.synchronize()
    assert var.numpy().tolist() == [0.0] and scaler.get_scale() == 2.0
