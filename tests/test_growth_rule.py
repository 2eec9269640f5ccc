"""One growth/backoff rule for the torch family (``scaling/torch.next_state``), shared by
GradScaler and both Keras optimizers, checked step for step against independent twins:
GradScaler's NumPy twin (:mod:`npu_loss_scale.scaling.reference.torch`, no code shared) and, for
Keras's parameters, the rule as docs/keras.md states it, written here in plain Python."""
import ast
import os

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.keras import NpuLossScaleOptimizer
from npu_loss_scale.scaling import torch as torch_rule
from npu_loss_scale.scaling.reference.torch import MIN_SCALE, GradScalerTwin

from keras_versions import custom_step
from tf_versions import tf2_only

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F32_MAX = float(np.finfo(np.float32).max)


def _rule(scale, count, finite, **params):
    new_scale, new_count = torch_rule.next_state(
        tf.constant(scale, tf.float32), tf.constant(count, tf.int32), tf.constant(finite),
        **params)
    return float(new_scale.numpy()), int(new_count.numpy())


@tf2_only
@pytest.mark.parametrize("seed", range(3))
def test_torch_parameters_follow_grad_scalers_twin_step_for_step(seed):
    rng = np.random.default_rng(seed)
    growth, backoff = float(rng.choice([2.0, 3.0, 1.5])), float(rng.choice([0.5, 0.25, 0.7]))
    interval = int(rng.integers(1, 4))
    start = float(rng.choice([2.0 ** -124, 1.0, 2.0 ** 125]))
    twin = GradScalerTwin(start, growth, backoff, interval)
    scale, count = start, 0
    for overflowed in rng.random(40) < 0.3:
        twin.step(bool(overflowed))
        scale, count = _rule(scale, count, not overflowed, growth_factor=growth,
                             backoff_factor=backoff, growth_interval=interval,
                             min_scale=float(MIN_SCALE))
        assert (scale, count) == (float(twin.scale), twin.growth_tracker)


@tf2_only
def test_torch_growth_point_is_exact_a_count_past_it_never_grows():
    twin = GradScalerTwin(4.0, 2.0, 0.5, 2)
    twin.growth_tracker = 5                      # past the interval (a lowered interval)
    twin.step(False)
    assert _rule(4.0, 5, True, growth_factor=2.0, backoff_factor=0.5, growth_interval=2,
                 min_scale=float(MIN_SCALE)) == (float(twin.scale), twin.growth_tracker) \
        == (4.0, 6)


def _keras_as_documented(scale, count, finite, steps, factor=2.0):
    """docs/keras.md: overflow halves the scale, never below 1, and restarts the count; after
    ``steps`` finite steps (or more) the scale doubles unless that is infinite."""
    if not finite:
        return max(scale / factor, 1.0), 0
    if count + 1 >= steps:
        doubled = scale * factor
        return (doubled if doubled <= F32_MAX else scale), 0
    return scale, count + 1


@tf2_only
@pytest.mark.parametrize("start, count, finite, steps, factor", [
    (8.0, 0, False, 3, 2.0), (1.0, 2, False, 3, 2.0), (1.5, 0, False, 3, 2.0),
    (8.0, 1, True, 3, 2.0), (8.0, 2, True, 3, 2.0), (8.0, 7, True, 3, 2.0),
    (2.0 ** 127, 2, True, 3, 2.0), (64.0, 2, True, 3, 1.0), (64.0, 1, False, 3, 1.0),
])
def test_keras_parameters_follow_the_documented_rule(start, count, finite, steps, factor):
    got = _rule(start, count, finite, growth_factor=factor, backoff_factor=1.0 / factor,
                growth_interval=steps, min_scale=1.0, at_or_past=True)
    assert got == _keras_as_documented(start, count, finite, steps, factor)


def test_the_twin_shares_no_code_with_the_rule():
    for rel, other in (("npu_loss_scale/scaling/reference/torch.py", "scaling.torch"),
                       ("npu_loss_scale/scaling/torch.py", "reference")):
        with open(os.path.join(ROOT, rel)) as source:
            tree = ast.parse(source.read())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.startswith("npu_loss_scale") and other in n], names
    with open(os.path.join(ROOT, "npu_loss_scale/scaling/reference/torch.py")) as source:
        assert "npu_loss_scale." not in "".join(
            line for line in source if line.startswith(("import", "from")))


@pytest.fixture
def calls(monkeypatch):
    """The ``finite`` arguments of every next_state call made while the test runs."""
    seen, rule = [], torch_rule.next_state

    def spy(scale, count, finite, **params):
        seen.append(finite)
        return rule(scale, count, finite, **params)

    monkeypatch.setattr(torch_rule, "next_state", spy)
    return seen


@tf2_only
def test_grad_scaler_update_goes_through_the_one_rule(calls):
    scaler = nls.GradScaler(init_scale=8.0, growth_interval=1)
    var = tf.Variable(1.0)
    opt = tf.keras.optimizers.SGD(0.1)
    for poison in (1.0, np.inf):
        with tf.GradientTape() as tape:
            loss = scaler.scale(var * poison)
        grads = tape.gradient(loss, [var])
        scaler.step(opt, list(zip(grads, [var])))
        scaler.update()
    assert len(calls) == 2
    assert scaler.get_scale() == 8.0              # grew to 16, halved back


@tf2_only
def test_keras_optimizer_steps_go_through_the_one_rule(calls):
    var = tf.Variable([1.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), initial_scale=8.0,
                                dynamic_growth_steps=1)
    custom_step(opt, var, lambda: tf.reduce_sum(var))
    custom_step(opt, var, lambda: tf.reduce_sum(var) * np.inf)
    assert calls, "the Keras optimizer did not use scaling.torch.next_state"
    assert float(opt.loss_scale) == 8.0           # doubled, then halved
