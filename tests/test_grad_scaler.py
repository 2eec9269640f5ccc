"""GradScaler: torch.amp.GradScaler's rules, eagerly and inside tf.function, on the package's
overflow detection (a saturated overflow that is_finite cannot see is caught)."""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale import agreement
from npu_loss_scale.device import register as emulation
from npu_loss_scale.frontends import NoInfChecksError, OptState


def _grads(values):
    return [tf.constant(v, tf.float32) for v in values]


def _pairs(grads, variables):
    return list(zip(grads, variables))


class CountingSGD(tf.keras.optimizers.SGD):
    """SGD that counts apply_gradients calls (Python side, so only eager use)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.applies = 0

    def apply_gradients(self, grads_and_vars, *args, **kwargs):  # pylint: disable=arguments-differ
        self.applies += 1
        return super().apply_gradients(grads_and_vars, *args, **kwargs)


def _torch_rule(scale, tracker, found, growth, backoff, interval):
    """torch's update rule in plain Python (the reference the scaler is compared with)."""
    if found:
        return scale * backoff, 0
    successful = tracker + 1
    if successful == interval:
        grown = np.float32(scale * growth)
        return (float(grown) if np.isfinite(grown) else scale), 0
    return scale, successful


# -- rules ----------------------------------------------------------------------------------------
def test_default_arguments_match_torch():
    s = nls.GradScaler()
    assert s.state_dict() == {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                              "growth_interval": 2000, "_growth_tracker": 0}
    assert isinstance(s.get_scale(), float) and s.get_scale() == 65536.0


def _one_iteration(scaler, opt, var, grad_value):
    g = tf.constant([grad_value], tf.float32) * scaler.get_scale()
    scaler.step(opt, [(g, var)])
    scaler.update()


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_scale_and_growth_count_follow_torch_rule_over_a_random_overflow_pattern(traced):
    rng = np.random.default_rng(3)
    pattern = [bool(x) for x in rng.random(40) < 0.25]
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.0)
    scaler = nls.GradScaler(init_scale=8.0, growth_factor=2.0, backoff_factor=0.25,
                            growth_interval=3)

    def body(bad):
        g = tf.where(bad, tf.constant([np.inf], tf.float32), tf.constant([1.0], tf.float32))
        scaler.step(opt, [(g, var)])
        scaler.update()

    run = tf.function(body) if traced else body
    scale, tracker = 8.0, 0
    for bad in pattern:
        run(tf.constant(bad))
        scale, tracker = _torch_rule(scale, tracker, bad, 2.0, 0.25, 3)
        state = scaler.state_dict()
        assert (state["scale"], state["_growth_tracker"]) == (scale, tracker)


def test_growth_only_when_grown_scale_is_finite_and_count_restarts():
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.0)
    scaler = nls.GradScaler(init_scale=3.0e38, growth_factor=2.0, growth_interval=1)
    scaler.step(opt, [(tf.constant([1.0]), var)])
    scaler.update()
    assert scaler.get_scale() == pytest.approx(3.0e38, rel=1e-6)
    assert scaler.state_dict()["_growth_tracker"] == 0


def test_update_with_new_scale_sets_it_and_leaves_the_growth_count_alone():
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.0)
    scaler = nls.GradScaler(init_scale=4.0, growth_interval=10)
    for _ in range(3):
        scaler.step(opt, [(tf.constant([1.0]), var)])
        scaler.update()
    assert scaler.state_dict()["_growth_tracker"] == 3
    source = tf.Variable(128.0)
    scaler.update(source)
    source.assign(5.0)                      # copied: later changes do not reach the scaler
    assert scaler.get_scale() == 128.0
    assert scaler.state_dict()["_growth_tracker"] == 3
    scaler.update(16)
    assert scaler.get_scale() == 16.0 and scaler.state_dict()["_growth_tracker"] == 3


def test_growth_count_resets_on_overflow():
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.0)
    scaler = nls.GradScaler(init_scale=4.0, growth_interval=3)
    for g in ([1.0], [1.0], [np.nan], [1.0], [1.0]):
        scaler.step(opt, [(tf.constant(g, tf.float32), var)])
        scaler.update()
    assert scaler.state_dict() == {"scale": 2.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                   "growth_interval": 3, "_growth_tracker": 2}


# -- torch's errors ----------------------------------------------------------------------------------
def test_unscale_twice_step_twice_and_unscale_after_step_raise():
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=2.0)
    g = scaler.unscale_(opt, [tf.constant([2.0])])
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt, [tf.constant([2.0])])
    scaler.step(opt, _pairs(g, [var]))
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt, _pairs(g, [var]))
    with pytest.raises(RuntimeError, match="unscale_\\(\\) is being called after step"):
        scaler.unscale_(opt, [tf.constant([2.0])])
    scaler.update()
    assert scaler._per_optimizer_states == {}   # pylint: disable=protected-access
    scaler.unscale_(opt, [tf.constant([2.0])])  # a new iteration accepts it again
    assert list(scaler._per_optimizer_states.values())[0]["stage"] is OptState.UNSCALED  # pylint: disable=protected-access


def test_update_without_any_inf_check_raises():
    scaler = nls.GradScaler()
    with pytest.raises(NoInfChecksError, match="No inf checks were recorded"):
        scaler.update()
    with pytest.raises(AssertionError):          # torch raises an AssertionError here
        scaler.update()


def test_load_state_dict_empty_on_enabled_raises_and_closure_is_refused():
    with pytest.raises(RuntimeError, match="state dict is empty"):
        nls.GradScaler().load_state_dict({})
    var = tf.Variable([1.0])
    with pytest.raises(RuntimeError, match="Closure"):
        nls.GradScaler().step(tf.keras.optimizers.SGD(0.1), [(tf.constant([1.0]), var)],
                              closure=lambda: None)


@pytest.mark.parametrize("kwargs, error, text", [
    ({"init_scale": 0.0}, ValueError, r"init_scale must be >= 1\.1754944e-38 \(float32's "
                                      r"smallest normal number\) and <= 3\.4028235e38 .*got 0\.0"),
    ({"growth_factor": 1.0}, ValueError, "growth_factor must be > 1; got 1.0"),
    ({"backoff_factor": 1.5}, ValueError, "backoff_factor must be in \\(0, 1\\); got 1.5"),
    ({"growth_interval": 0}, ValueError, "growth_interval must be an integer >= 1; got 0"),
    ({"enabled": 1}, TypeError, "enabled must be True or False"),
    ({"backend": "gpu"}, ValueError, "backend must be one of 'npu', 'emulation', 'inf_nan'"),
])
def test_bad_constructor_arguments_name_argument_value_and_accepted(kwargs, error, text):
    with pytest.raises(error, match=text):
        nls.GradScaler(**kwargs)


def test_setters_validate_and_getters_return_python_numbers():
    s = nls.GradScaler()
    s.set_growth_factor(3.0)
    s.set_backoff_factor(0.25)
    s.set_growth_interval(7)
    assert (s.get_growth_factor(), s.get_backoff_factor(), s.get_growth_interval()) == \
        (3.0, 0.25, 7)
    assert isinstance(s.get_growth_interval(up_to_date=True), int)
    with pytest.raises(ValueError, match="new_interval must be an integer >= 1; got -1"):
        s.set_growth_interval(-1)


# -- disabled ----------------------------------------------------------------------------------------
def test_disabled_is_a_true_pass_through():
    var = tf.Variable([1.0])
    opt = CountingSGD(0.5)
    s = nls.GradScaler(enabled=False)
    loss = tf.constant(3.0)
    assert s.scale(loss) is loss
    grads = [tf.constant([np.inf])]
    assert s.unscale_(opt, grads) is grads
    result = s.step(opt, [(tf.constant([2.0]), var)])
    assert opt.applies == 1 and int(result.numpy()) == 1      # apply_gradients' own result
    assert s.update() is None and s.get_scale() == 1.0 and s.state_dict() == {}
    s.load_state_dict({})                                    # no-op, as torch
    assert var.numpy().tolist() == [0.0]
    assert not s.is_enabled() and s.variables == ()


# -- detection -------------------------------------------------------------------------------------------
def _saturating_step(scaler, opt, var, mult):
    with tf.GradientTape() as tape:
        y = emulation.saturate(tf.cast(var * mult, tf.float16))   # 1e5 saturates to 65504
        loss = tf.reduce_sum(tf.cast(y, tf.float32))
        scaled = scaler.scale(loss)
    grads = tape.gradient(scaled, [var])
    finite = all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads) \
        if tf.executing_eagerly() else None
    scaler.step(opt, _pairs(grads, [var]))
    scaler.update()
    return finite


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_saturated_overflow_is_caught_where_is_finite_misses_it(traced):
    var = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=4.0)
    emulation.npu_clear_float_status_v2()
    run = tf.function(lambda m: _saturating_step(scaler, opt, var, m)) if traced else \
        (lambda m: _saturating_step(scaler, opt, var, m))
    finite = run(tf.constant(1e5))
    if not traced:
        assert finite is True                 # the gradients look finite ...
    assert var.numpy().tolist() == [1.0, 2.0]  # ... but the step was skipped
    assert scaler.get_scale() == 2.0
    run(tf.constant(1.0))                      # register cleared by the read: next step applies
    np.testing.assert_allclose(var.numpy(), [0.9, 1.9], rtol=1e-6)
    assert scaler.get_scale() == 2.0


def test_inf_nan_backend_misses_the_saturated_overflow():
    var = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=4.0, backend="inf_nan")
    assert scaler.backend_name == "inf_nan"
    _saturating_step(scaler, opt, var, tf.constant(1e5))
    np.testing.assert_allclose(var.numpy(), [1.0 - 1e4, 2.0 - 1e4])  # applied: not seen
    emulation.npu_clear_float_status_v2()


def test_inf_nan_mode_catches_ieee_overflow():
    emulation.set_device_sat_mode(emulation.INF_NAN)
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=2.0 ** 20)
    with tf.GradientTape() as tape:
        y = tf.cast(tf.cast(var, tf.float16) * tf.constant(2.0, tf.float16), tf.float32)
        scaled = scaler.scale(tf.reduce_sum(y))
    grads = tape.gradient(scaled, [var])
    # d/dvar in float16 of 2**21 = inf: the cast's gradient overflows
    scaler.step(opt, _pairs(grads, [var]))
    scaler.update()
    assert var.numpy().tolist() == [1.0] and scaler.get_scale() == 2.0 ** 19


def test_register_overflow_from_the_forward_pass_before_scale_is_counted():
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=1.0)
    emulation.saturate(tf.constant([1e5], tf.float16) * tf.constant(1.0, tf.float16) * 10)
    with tf.GradientTape() as tape:
        scaled = scaler.scale(tf.reduce_sum(var))
    scaler.step(opt, _pairs(tape.gradient(scaled, [var]), [var]))
    scaler.update()
    assert var.numpy().tolist() == [1.0]       # sticky register: the step is skipped


def test_unscale_returns_unscaled_gradients_and_step_does_not_unscale_again():
    var = tf.Variable([0.0, 0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=8.0)
    scaled = [tf.constant([8.0, 80.0])]
    (g,) = scaler.unscale_(opt, scaled)
    np.testing.assert_allclose(g.numpy(), [1.0, 10.0])
    clipped = tf.clip_by_norm(g, 1.0)
    scaler.step(opt, [(clipped, var)])
    np.testing.assert_allclose(var.numpy(), -clipped.numpy(), rtol=1e-6)
    pairs = scaler.unscale_(tf.keras.optimizers.SGD(1.0), [(tf.constant([8.0, 8.0]), var)])
    assert pairs[0][1] is var and pairs[0][0].numpy().tolist() == [1.0, 1.0]


def test_float16_and_indexed_slices_gradients_are_unscaled():
    scaler = nls.GradScaler(init_scale=2.0 ** 24)
    opt = tf.keras.optimizers.SGD(0.1)
    sparse = tf.IndexedSlices(tf.constant([[2.0 ** 24]]), tf.constant([1]), tf.constant([3, 1]))
    half = tf.constant([2048.0], tf.float16)
    g_sparse, g_half, none = scaler.unscale_(opt, [sparse, half, None])
    assert isinstance(g_sparse, tf.IndexedSlices) and g_sparse.values.numpy().tolist() == [[1.0]]
    assert g_half.dtype == tf.float16 and g_half.numpy().tolist() == [2048.0 / 2 ** 24]
    assert none is None


# -- several optimizers -------------------------------------------------------------------------
def test_one_overflow_among_several_optimizers_backs_off_once_and_skips_only_that_one():
    a, b = tf.Variable([1.0]), tf.Variable([1.0])
    opt_a, opt_b = CountingSGD(1.0), CountingSGD(1.0)
    scaler = nls.GradScaler(init_scale=4.0, backoff_factor=0.5)
    assert scaler.step(opt_a, [(tf.constant([np.inf]), a)]) is None
    scaler.step(opt_b, [(tf.constant([4.0]), b)])
    scaler.update()
    assert (opt_a.applies, opt_b.applies) == (0, 1)
    assert a.numpy().tolist() == [1.0] and b.numpy().tolist() == [0.0]
    assert scaler.get_scale() == 2.0


def test_register_overflow_skips_every_optimizer_of_the_iteration():
    a, b = tf.Variable([1.0]), tf.Variable([1.0])
    opt_a, opt_b = CountingSGD(1.0), CountingSGD(1.0)
    scaler = nls.GradScaler(init_scale=4.0)
    emulation.saturate(tf.constant([1e38], tf.float32) * 10.0)   # a saturated op of this step
    scaler.step(opt_a, [(tf.constant([4.0]), a)])
    scaler.step(opt_b, [(tf.constant([4.0]), b)])
    scaler.update()
    assert (opt_a.applies, opt_b.applies) == (0, 0) and scaler.get_scale() == 2.0


# -- optimizers of both APIs, in tf.function -------------------------------------------------------
@pytest.mark.parametrize("make_opt", [
    lambda: tf.keras.optimizers.Adam(0.1),
    lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
], ids=["keras_adam", "v1_momentum"])
def test_skip_then_apply_inside_tf_function(make_opt):
    var = tf.Variable([1.0, -1.0])
    opt = make_opt()
    scaler = nls.GradScaler(init_scale=2.0)

    @tf.function
    def train(bad):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(var * var) * tf.where(bad, np.inf, 1.0)
            scaled = scaler.scale(loss)
        grads = tape.gradient(scaled, [var])
        scaler.step(opt, _pairs(grads, [var]))
        scaler.update()

    train(tf.constant(True))
    assert var.numpy().tolist() == [1.0, -1.0] and scaler.get_scale() == 1.0
    train(tf.constant(False))
    assert var.numpy()[0] < 1.0 and var.numpy()[1] > -1.0


# -- state ------------------------------------------------------------------------------------------------
def test_state_dict_round_trip_and_checkpoint(tmp_path):
    src = nls.GradScaler(init_scale=32.0, growth_interval=5)
    var = tf.Variable([0.0])
    for g in ([1.0], [1.0]):
        src.step(tf.keras.optimizers.SGD(0.0), [(tf.constant(g), var)])
        src.update()
    dst = nls.GradScaler()
    dst.load_state_dict(src.state_dict())
    assert dst.state_dict() == src.state_dict() == {
        "scale": 32.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 5,
        "_growth_tracker": 2}
    path = tf.train.Checkpoint(scaler=src).save(str(tmp_path / "ckpt"))
    other = nls.GradScaler()
    tf.train.Checkpoint(scaler=other).restore(path).assert_consumed()
    assert other.state_dict() == src.state_dict()


# -- agreement -----------------------------------------------------------------------------------------
class OtherRankOverflowed(agreement.Agreement):
    """Stands in for a collective: another rank reports an overflow; counts the calls."""

    name = "fake"

    def __init__(self):
        self.calls = 0

    def reduce(self, status):
        self.calls += 1
        return status + 1.0


def test_overflow_on_another_rank_makes_this_rank_skip_with_one_collective_per_step():
    var = tf.Variable([1.0])
    opt = CountingSGD(1.0)
    fake = OtherRankOverflowed()
    scaler = nls.GradScaler(init_scale=4.0, is_distributed=True, agreement=fake)
    scaler.step(opt, [(tf.constant([4.0]), var)])
    scaler.update()
    assert (opt.applies, fake.calls) == (0, 1) and scaler.get_scale() == 2.0


def test_is_distributed_with_nothing_to_agree_through_raises():
    scaler = nls.GradScaler(is_distributed=True)
    with pytest.raises(RuntimeError, match="nothing to agree on the overflow status"):
        scaler.step(tf.keras.optimizers.SGD(0.1), [(tf.constant([1.0]), tf.Variable([1.0]))])


# -- the register is shared by tf.function and eager code, and sticky until read ----------------
def test_overflow_recorded_in_a_tf_function_is_seen_by_an_eager_step():
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=4.0)
    emulation.npu_clear_float_status_v2()

    @tf.function
    def forward_that_saturates():
        return emulation.saturate(tf.constant([1e5], tf.float32) * tf.constant(1e35))

    forward_that_saturates()
    scaler.step(opt, [(tf.constant([4.0]), var)])
    scaler.update()
    assert var.numpy().tolist() == [1.0] and scaler.get_scale() == 2.0


def test_overflow_recorded_eagerly_is_seen_by_a_traced_step():
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=4.0)

    @tf.function
    def train():
        scaler.step(opt, [(tf.constant([4.0]), var)])
        scaler.update()

    emulation.npu_clear_float_status_v2()
    train()                                              # traced and run: clean, applied
    np.testing.assert_allclose(var.numpy(), [0.9], rtol=1e-6)
    emulation.saturate(tf.constant([1e5], tf.float32) * tf.constant(1e35))   # eager record
    train()                                              # the same trace reads it: skipped
    np.testing.assert_allclose(var.numpy(), [0.9], rtol=1e-6)
    assert scaler.get_scale() == 2.0


def test_update_outside_the_tf_function_of_its_step_raises_a_clear_error():
    var = tf.Variable([1.0])
    opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)   # creates no variables: one trace
    scaler = nls.GradScaler(init_scale=4.0)
    @tf.function
    def step_only():
        scaler.step(opt, [(tf.constant([4.0]), var)])

    step_only()
    with pytest.raises(RuntimeError, match="update\\(\\) must run where step\\(\\)"):
        scaler.update()


def test_emulation_counts_a_scaled_gradient_at_float16_max_as_an_overflow():
    """A saturated float16 gradient is ±65504: finite, but what an overflow leaves behind."""
    emulation.npu_clear_float_status_v2()
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=2.0)
    scaler.unscale_(opt, [tf.constant([65504.0, 1.0], tf.float16)])
    assert float(scaler._per_optimizer_states[id(opt)]["found_inf"]) == 1.0  # pylint: disable=protected-access
    ieee = nls.GradScaler(init_scale=2.0, backend="inf_nan")
    ieee.unscale_(opt, [tf.constant([65504.0, 1.0], tf.float16)])
    assert float(ieee._per_optimizer_states[id(opt)]["found_inf"]) == 0.0  # pylint: disable=protected-access


_GOOD_STATE = {"scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5,
               "growth_interval": 10, "_growth_tracker": 3}


@pytest.mark.parametrize("key, value, error, text", [
    ("_growth_tracker", "abc", TypeError, r"state_dict\['_growth_tracker'\] must be an integer "
                                          r">= 0; got 'abc'"),
    ("_growth_tracker", -5, ValueError, r"state_dict\['_growth_tracker'\] must be an integer "
                                        r">= 0; got -5"),
    ("_growth_tracker", 2.7, ValueError, r"state_dict\['_growth_tracker'\] must be an integer "
                                         r">= 0; got 2\.7"),
    ("scale", -1.0, ValueError, r"state_dict\['scale'\] must be >= 1\.1754944e-38 .*got -1\.0"),
    ("scale", float("inf"), ValueError, r"state_dict\['scale'\] must be a finite real"),
    ("growth_factor", 1.0, ValueError, r"state_dict\['growth_factor'\] must be > 1; got 1\.0"),
    ("backoff_factor", 1.5, ValueError, r"state_dict\['backoff_factor'\] must be in \(0, 1\); "
                                        r"got 1\.5"),
    ("growth_interval", 0, ValueError, r"state_dict\['growth_interval'\] must be an integer "
                                       r">= 1; got 0"),
])
def test_load_state_dict_refuses_bad_values_and_changes_nothing(key, value, error, text):
    scaler = nls.GradScaler(init_scale=4.0, growth_factor=3.0, backoff_factor=0.25,
                            growth_interval=7)
    before = scaler.state_dict()
    with pytest.raises(error, match=text):
        scaler.load_state_dict(dict(_GOOD_STATE, **{key: value}))
    assert scaler.state_dict() == before


def test_load_state_dict_accepts_an_integral_float_growth_tracker():
    scaler = nls.GradScaler()
    scaler.load_state_dict(dict(_GOOD_STATE, _growth_tracker=3.0))
    assert scaler.state_dict() == _GOOD_STATE


@pytest.mark.parametrize("bad", [-3.0, 0.0, float("inf"), float("nan")])
def test_update_refuses_a_non_positive_or_non_finite_new_scale_tensor(bad):
    scaler = nls.GradScaler(init_scale=4.0)
    with pytest.raises(ValueError, match="new_scale must be"):
        scaler.update(new_scale=tf.constant(bad))
    assert scaler.get_scale() == 4.0


def test_update_checks_a_new_scale_tensor_known_only_when_the_function_runs():
    scaler = nls.GradScaler(init_scale=4.0)

    @tf.function
    def set_scale(value):
        scaler.update(new_scale=value)

    set_scale(tf.constant(16.0))
    assert scaler.get_scale() == 16.0
    with pytest.raises(tf.errors.InvalidArgumentError, match="new_scale must be"):
        set_scale(tf.constant(-3.0))
    assert scaler.get_scale() == 16.0


def test_scale_accepts_any_iterable_as_torch_does():
    scaler = nls.GradScaler(init_scale=4.0)
    out = scaler.scale(tf.constant(float(v)) for v in (1, 2))
    assert not isinstance(out, (list, tuple))             # an iterator, as torch's map
    assert [float(t) for t in out] == [4.0, 8.0]
    nested = scaler.scale([tf.constant(1.0), (tf.constant(2.0), [tf.constant(3.0)])])
    assert isinstance(nested, list) and isinstance(nested[1], tuple)
    assert [float(nested[0]), float(nested[1][0]), float(nested[1][1][0])] == [4.0, 8.0, 12.0]
    assert [float(t) for t in scaler.scale(iter([tf.constant(1.0)]))] == [4.0]


def test_scale_keeps_a_named_tuple():
    import collections  # pylint: disable=import-outside-toplevel
    Losses = collections.namedtuple("Losses", "main aux")
    out = nls.GradScaler(init_scale=2.0).scale(Losses(tf.constant(1.0), tf.constant(3.0)))
    assert type(out) is Losses and (float(out.main), float(out.aux)) == (2.0, 6.0)


@pytest.mark.parametrize("bad", ["loss", 3.0, {"a": tf.constant(1.0)}])
def test_scale_refuses_what_is_not_a_tensor_or_an_iterable_of_tensors(bad):
    with pytest.raises(TypeError, match="outputs must be a tensor or an iterable"):
        nls.GradScaler().scale(bad)


def test_update_in_the_wrong_context_raises_first_and_a_corrected_retry_succeeds():
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=4.0, growth_interval=1000, backend="inf_nan")
    scaler.step(opt, [(tf.constant([np.inf]), var)])      # eagerly: overflow, skipped
    with pytest.raises(RuntimeError, match="same tf.function, or all eagerly"):
        tf.function(scaler.update)()
    assert scaler.get_scale() == 4.0
    assert [s["stage"] for s in scaler._per_optimizer_states.values()] == [OptState.STEPPED]  # pylint: disable=protected-access
    scaler.update()                                        # the retry: eagerly, as the step
    assert scaler.get_scale() == 2.0 and var.numpy().tolist() == [0.0]
    assert scaler._per_optimizer_states == {}             # pylint: disable=protected-access


def test_update_with_no_inf_checks_raises_and_the_next_iteration_still_works():
    var = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=4.0, growth_interval=1, backend="inf_nan")
    with pytest.raises(NoInfChecksError):
        scaler.update()
    assert scaler.get_scale() == 4.0
    scaler.step(opt, [(tf.constant([4.0]), var)])
    scaler.update()
    assert var.numpy().tolist() == [-1.0] and scaler.get_scale() == 8.0
