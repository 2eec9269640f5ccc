"""GradScaler's scale never reaches a subnormal or zero value, and an unscaled gradient that
overflows is caught: no NaN or inf is ever written into the weights.

Expected values are hand computations (powers of two) and the pure twin
:mod:`npu_loss_scale.scaling.reference.torch`, which shares no code with the scaler.
"""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.scaling.reference.torch import GradScalerTwin
from warned import stuck

TINY = 2.0 ** -126          # float32's smallest normal number


def _train_step(scaler, opt, w, bad):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w) * tf.where(bad, np.inf, 1.0)
        scaled = scaler.scale(loss)
    grads = tape.gradient(scaled, [w])
    scaler.step(opt, list(zip(grads, [w])))
    scaler.update()


@pytest.mark.slow
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_a_long_overflow_run_stops_at_the_smallest_normal_scale_and_the_next_step_trains(traced):
    w = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=2.0 ** -120)
    step = tf.function(_train_step) if traced else _train_step
    for _ in range(12):
        step(scaler, opt, w, tf.constant(True))
    assert scaler.get_scale() == TINY            # 2**-120 halved 12 times stops at 2**-126
    assert w.numpy().tolist() == [1.0, 2.0]
    step(scaler, opt, w, tf.constant(False))
    np.testing.assert_allclose(w.numpy(), [0.8, 1.6], rtol=1e-6)   # w - 0.1 * 2w


def test_the_twin_stops_at_the_smallest_normal_scale():
    twin = GradScalerTwin(2.0 ** -125, 2.0, 0.5, 3)
    assert not twin.step(True) and twin.scale == np.float32(TINY)
    assert twin.step(True) and twin.scale == np.float32(TINY)         # stuck: reported
    twin = GradScalerTwin(3 * TINY, 2.0, 0.25, 3)
    twin.step(True)                                                    # 0.75 * 2**-126 < TINY
    assert twin.scale == np.float32(TINY)
    twin.step(False), twin.step(False), twin.step(False)               # grows again
    assert twin.as_dict() == {"scale": 2 * TINY, "growth_tracker": 0}


@pytest.mark.slow
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_scale_and_count_equal_the_twin_through_long_overflow_runs(traced):
    rng = np.random.default_rng(20)
    pattern = [bool(x) for x in rng.random(120) < 0.8]      # mostly overflows: hits the floor
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.0)
    scaler = nls.GradScaler(init_scale=2.0 ** -100, backoff_factor=0.25, growth_interval=2)
    twin = GradScalerTwin(2.0 ** -100, 2.0, 0.25, 2)

    def body(bad):
        g = tf.where(bad, tf.constant([np.inf]), tf.constant([1.0]))
        scaler.step(opt, [(g, var)])
        scaler.update()

    run = tf.function(body) if traced else body
    floor_seen = False
    for bad in pattern:
        run(tf.constant(bad))
        twin.step(bad)
        state = scaler.state_dict()
        assert (state["scale"], state["_growth_tracker"]) == (float(twin.scale),
                                                               twin.growth_tracker)
        floor_seen |= state["scale"] == TINY
    assert floor_seen


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_a_gradient_that_overflows_only_when_unscaled_skips_the_step(traced):
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=TINY)

    def body():
        # scaled gradient 8 is finite; unscaled it is 8 * 2**126 = 2**129: inf in float32
        scaler.step(opt, [(tf.constant([8.0]), var)])
        scaler.update()

    (tf.function(body) if traced else body)()
    assert var.numpy().tolist() == [1.0]
    assert scaler.get_scale() == TINY


def test_an_overflow_at_the_smallest_scale_warns_once_per_update(recwarn):
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=2 * TINY)
    stuck(recwarn)
    for expected in (0, 1, 2):
        scaler.step(opt, [(tf.constant([np.inf]), var)])
        scaler.update()
        found = stuck(recwarn)
        assert len(found) == min(expected, 1), found
        assert all("overflowed at the smallest scale %g " % TINY in m for m in found), found


@pytest.mark.parametrize("value", [TINY / 2, 0.0, -1.0, 1e39, np.inf, np.nan])
def test_a_scale_outside_float32_normal_range_is_refused_everywhere(value):
    accepted = r">= 1\.1754944e-38 \(float32's smallest normal number\) and <= 3\.4028235e38"
    with pytest.raises(ValueError, match="init_scale must be .*" + accepted):
        nls.GradScaler(init_scale=value)
    scaler = nls.GradScaler(init_scale=4.0)
    state = scaler.state_dict()
    with pytest.raises(ValueError, match=r"state_dict\['scale'\] must be .*" + accepted):
        scaler.load_state_dict(dict(state, scale=value))
    scaler.step(tf.keras.optimizers.SGD(0.0), [(tf.constant([1.0]), tf.Variable([0.0]))])
    with pytest.raises(ValueError, match="new_scale must be .*" + accepted):
        scaler.update(value)
    with pytest.raises(ValueError, match="new_scale must be .*" + accepted):
        scaler.update(tf.constant(value, tf.float64))
    assert scaler.state_dict() == state


def test_the_smallest_normal_scale_itself_is_accepted():
    assert nls.GradScaler(init_scale=TINY).get_scale() == TINY


# -- a checkpoint that restores an impossible state --------------------------------------------
def _tampered_checkpoint(tmp_path, **values):
    """A tf.train.Checkpoint of a GradScaler whose variables were assigned ``values`` directly
    (as an edited or foreign checkpoint would hold them)."""
    source = nls.GradScaler(init_scale=8.0)
    for name, value in values.items():
        getattr(source, "_" + name).assign(value)
    return tf.train.Checkpoint(scaler=source).save(str(tmp_path / "ckpt"))


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("name, value, shown, accepted", [
    ("scale", np.nan, "nan", ">= 1.1754944e-38"),
    ("scale", np.inf, "inf", ">= 1.1754944e-38"),
    ("scale", 0.0, "0", ">= 1.1754944e-38"),
    ("scale", -4.0, "-4", ">= 1.1754944e-38"),
    ("scale", 2.0 ** -140, "(7.17e-43|0)", ">= 1.1754944e-38"),   # subnormal (flushed in a graph)
    ("growth_tracker", -3, "-3", "an integer >= 0"),
    ("growth_factor", 0.5, "0.5", "a finite number > 1"),
    ("backoff_factor", 1.0, "1", r"a number in \(0, 1\)"),
    ("growth_interval", 0, "0", "an integer >= 1"),
])
def test_a_restored_impossible_state_is_refused_before_anything_is_applied(
        tmp_path, traced, name, value, shown, accepted):
    path = _tampered_checkpoint(tmp_path, **{name: value})
    scaler = nls.GradScaler()
    tf.train.Checkpoint(scaler=scaler).restore(path)
    w = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(0.1)
    step = tf.function(_train_step) if traced else _train_step
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"(?s)GradScaler: variable %s \(.*\) holds.*%s.*accepted: .*%s"
                       % (name, shown, accepted)):
        step(scaler, opt, w, tf.constant(False))
    assert w.numpy().tolist() == [1.0, 2.0]
    assert int(opt.iterations.numpy()) == 0


def test_a_restored_impossible_state_is_refused_by_the_optimizer_thread(tmp_path):
    path = _tampered_checkpoint(tmp_path, scale=np.nan)
    scaler = nls.GradScaler()
    tf.train.Checkpoint(scaler=scaler).restore(path)
    with pytest.raises(tf.errors.InvalidArgumentError, match="variable scale .* holds"):
        nls.OptimizerThread(scaler)


def test_a_checkpoint_of_a_good_state_still_restores_and_trains(tmp_path):
    path = _tampered_checkpoint(tmp_path, scale=TINY, growth_tracker=3)
    scaler = nls.GradScaler()
    tf.train.Checkpoint(scaler=scaler).restore(path).assert_consumed()
    w = tf.Variable([1.0, 2.0])
    _train_step(scaler, tf.keras.optimizers.SGD(0.1), w, tf.constant(False))
    np.testing.assert_allclose(w.numpy(), [0.8, 1.6], rtol=1e-6)
    assert scaler.state_dict()["_growth_tracker"] == 4


def test_a_wrong_shaped_scale_is_refused_by_the_restore_itself(tmp_path):
    """The restore raises naming the variable, the shape and value found and the shape
    accepted (documented in docs/grad_scaler.md); the scale keeps its value."""
    foreign = tf.Module()
    foreign._scale = tf.Variable([1.0, 2.0])   # pylint: disable=protected-access
    path = tf.train.Checkpoint(scaler=foreign).save(str(tmp_path / "ckpt"))
    scaler = nls.GradScaler(init_scale=8.0)
    with pytest.raises(ValueError, match=r"GradScaler: the checkpoint being restored holds "
                                         r"shape \(2,\) for scale \(\[1\. 2\.\]\); accepted: "
                                         r"shape \(\) \(float32\)\. Nothing was restored"):
        tf.train.Checkpoint(scaler=scaler).restore(path)
    assert scaler.get_scale() == 8.0
