"""What Ascend's TF2 scripts (run without ``--tf1``) read from TensorFlow 2.4 that later versions
dropped (:mod:`npu_loss_scale.ascend.tf24`): ``Graph._last_id``, the op seed of their
``npu_ops.py`` dropout under a global seed; ``tf.keras.mixed_precision.experimental``, through
which their model-garden code sets its dtype policy."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_versions import (LEGACY_CLASS_NAME, NO_SPLIT_REASON, OPTIMIZER_V2_ONLY,
                            legacy_optimizers)
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation
from npu_loss_scale.ascend import tf24

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "scripts", "ascend_tf2_seeded_dropout", "train.py")
POLICY_SCRIPT = os.path.join(HERE, "scripts", "ascend_tf2_experimental_policy.py")
LEGACY_SCRIPT = os.path.join(HERE, "scripts", "ascend_tf2_legacy_optimizer.py")
INTERNALS_SCRIPT = os.path.join(HERE, "scripts", "ascend_tf2_tf24_internals", "train.py")
KERAS3 = hasattr(tf.keras.mixed_precision, "DTypePolicy")
# TF 2.9 removed tf.keras.mixed_precision.experimental (its release notes); 2.0-2.8 have their own
KERAS_OWN_EXPERIMENTAL = tuple(int(part) for part in tf.version.VERSION.split(".")[:2]) < (2, 9)


def test_graph_last_id_counts_the_operations_added_as_tf_2_4_did():
    tf24.add_graph_last_id()
    tf24.add_graph_last_id()  # idempotent
    graph = tf.Graph()
    assert graph._last_id == 0  # pylint: disable=protected-access
    with graph.as_default():
        x = tf.constant(1.0)
        assert graph._last_id == 1  # pylint: disable=protected-access
        tf.add(x, x)
        assert graph._last_id == 2  # pylint: disable=protected-access

    seen = []

    @tf.function
    def step(v):
        seen.append(tf.compat.v1.get_default_graph()._last_id)  # pylint: disable=protected-access
        w = v * 2.0
        seen.append(tf.compat.v1.get_default_graph()._last_id)  # pylint: disable=protected-access
        return w

    step(tf.constant(1.0))
    assert seen[1] == seen[0] + 2  # the constant 2.0 and the multiplication


def _emulate(tmp_path, *args, every_line=False):
    env = dict(os.environ)
    for name in (detection.ENV_VAR, emulation.MODE_ENV_VAR, "RANK_SIZE",
                 "NPU_LOSS_SCALE_EMULATE_REPORT"):
        env.pop(name, None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["PYTHONPATH"] = REPO
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--report", str(report)]
                         + list(args), env=env, cwd=str(tmp_path), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith(("{", "["))]
    return (lines if every_line else lines[-1]), report


@pytest.mark.slow
def test_a_tf2_script_whose_dropout_seeds_from_graph_last_id_trains(tmp_path):
    """Before: AttributeError: 'FuncGraph' object has no attribute '_last_id' when ``fit`` built
    the dropout; now it trains 2 steps through NpuLossScaleOptimizer with op seed _last_id."""
    printed, report = _emulate(tmp_path, SCRIPT)
    seeds = printed["seeds"]
    assert seeds and all(graph_seed == 1234 and op_seed > 0 for graph_seed, op_seed in seeds)
    steps = json.loads(report.read_text())
    assert steps["steps_applied"] + steps["steps_skipped"] == 2


def test_a_keras_with_its_own_experimental_api_keeps_it():
    """Keras 2.0-2.8 (TF 2.6.5's among them) have their own ``mixed_precision.experimental``,
    whose ``Policy`` carries a ``DynamicLossScale`` object: the mapping is added only where TF 2.9
    removed it."""
    tf24.add_keras_mixed_precision_experimental()
    tf24.add_keras_mixed_precision_experimental()  # idempotent
    experimental = tf.keras.mixed_precision.experimental
    mapped = "npu_loss_scale" in (experimental.__doc__ or "")
    assert mapped == (not KERAS_OWN_EXPERIMENTAL)
    carried = experimental.Policy("mixed_float16", loss_scale="dynamic").loss_scale
    assert (type(carried).__name__ == "DynamicLossScale") == KERAS_OWN_EXPERIMENTAL


def test_keras_mixed_precision_experimental_maps_to_the_stable_api():
    """The mapping itself, built on whichever stable API the running Keras has."""
    experimental = tf24._experimental(tf.keras.mixed_precision)  # pylint: disable=protected-access
    try:
        policy = experimental.Policy("mixed_float16")
        assert (policy.name, policy.compute_dtype, policy.variable_dtype, policy.loss_scale) == \
            ("mixed_float16", "float16", "float32", "dynamic")     # "auto", as in TF 2.4
        assert experimental.Policy("float32").loss_scale is None
        assert experimental.Policy("mixed_float16", loss_scale=128).loss_scale == 128
        experimental.set_policy(policy)
        assert experimental.global_policy().name == "mixed_float16"
        layer = tf.keras.layers.Dense(2)
        assert experimental.get_layer_policy(layer).name == "mixed_float16"
        experimental.set_policy("float32")
        assert tf.keras.mixed_precision.global_policy().name == "float32"
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    dynamic = experimental.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1), "dynamic")
    assert isinstance(dynamic, tf.keras.mixed_precision.LossScaleOptimizer)
    assert float(dynamic.initial_scale) == 2.0 ** 15
    if KERAS3:
        with pytest.raises(NotImplementedError, match="no fixed scale"):
            experimental.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1), 64)
    else:
        fixed = experimental.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1), 64)
        assert (float(fixed.loss_scale), fixed.dynamic) == (64.0, False)
    with pytest.raises(ValueError, match="dynamic"):
        experimental.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1), "static")
    with pytest.raises(TypeError, match="LossScale object"):
        experimental.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1), object())


@pytest.mark.slow
def test_a_tf2_script_setting_its_policy_through_the_experimental_api_trains(tmp_path):
    """Before: AttributeError: module 'keras.api._v2.keras.mixed_precision' has no attribute
    'experimental' at the script's set_policy; now both dtypes train 2 steps."""
    for dtype, compute in (("fp16", "float16"), ("fp32", "float32")):
        printed, report = _emulate(tmp_path, POLICY_SCRIPT, dtype)
        assert printed == {"policy": "mixed_float16" if dtype == "fp16" else "float32",
                           "carried": "dynamic" if dtype == "fp16" else None,
                           "compute_dtype": compute, "steps": 2}
        steps = json.loads(report.read_text())
        assert steps["steps_applied"] + steps["steps_skipped"] == 2


def _largest_fitting_scale():
    """The legacy-optimizer script's first step in float64 NumPy: the largest power of two from
    2**15 down at which every scaled gradient stays under float16's largest value."""
    rng = np.random.default_rng(0)
    kernel1, kernel2 = 0.4 * rng.standard_normal((4, 4)), 0.4 * rng.standard_normal((4, 1))
    x = np.full((8, 4), 2.0)
    hidden = x @ kernel1
    d_out = 2.0 * (hidden @ kernel2) / 8.0           # d mean(out**2) / d out, 8 outputs
    d_hidden = d_out @ kernel2.T
    grads = [x.T @ d_hidden, d_hidden.sum(0), hidden.T @ d_out, d_out.sum(0)]
    largest = max(float(np.abs(g).max()) for g in grads)
    scale = 2.0 ** 15
    while scale * largest >= 65504.0:
        scale /= 2.0
    return scale


@pytest.mark.skipif(KERAS3, reason="Keras 3 has no legacy (OptimizerV2) optimizers")
@pytest.mark.slow
def test_a_tf2_script_with_an_optimizerv2_optimizer_trains_through_npu_loss_scale_optimizer(
        tmp_path):
    """Before: TypeError (legacy optimizers not supported) at NpuLossScaleOptimizer(...), where
    the adapter of TF 2.4 took them. Now: under allow_mix_precision the scaled gradient
    overflows float16 at 2**15 and 2**14 (skipped, scale halved) and fits at 2**13; under
    force_fp32 nothing overflows."""
    fits = _largest_fitting_scale()
    assert fits == 2.0 ** 13  # two skipped steps, then two applied
    for mode, finite, applied in (("allow_mix_precision", [False, False, True, True], 2),
                                  ("force_fp32", [True] * 4, 4)):
        lines, report = _emulate(tmp_path, LEGACY_SCRIPT, "4", mode, every_line=True)
        assert [l["finite"] for l in lines] == finite
        assert {l["optimizer"] for l in lines} == {LEGACY_CLASS_NAME}
        if mode == "allow_mix_precision":
            assert [l["scale_before"] for l in lines] == [2.0 ** 15, 2.0 ** 14, fits, fits]
        assert json.loads(report.read_text()) == {
            "optimizers_built": 1, "train_ops_built": 0, "steps_applied": applied,
            "steps_skipped": 4 - applied}


_MOVED_INTERNALS = """\
import json
import tensorflow as tf
from tensorflow.python.distribute import distribution_strategy_context as ctx
import tensorflow.python.distribute.distribution_strategy_context as ctx2
from tensorflow.python.framework import ops
print(json.dumps([ctx.get_strategy() is tf.distribute.get_strategy(),
                  ctx2.has_strategy() is False,
                  ctx.in_cross_replica_context() == tf.distribute.in_cross_replica_context(),
                  ops.Tensor is tf.Tensor, ops.IndexedSlices is tf.IndexedSlices,
                  ops.convert_to_tensor_v2_with_dispatch(1.0).dtype == tf.float32,
                  ops.get_default_graph() is tf.compat.v1.get_default_graph()]))
"""


@pytest.mark.slow
def test_a_tf2_script_gets_the_tf_internals_tf_2_14_moved(tmp_path):
    """``distribution_strategy_context`` (folded into distribute_lib in TF 2.14) and the names
    moved out of ``framework.ops`` resolve in a TF2 script's own files, as in TF1 mode."""
    script = tmp_path / "internals.py"
    script.write_text(_MOVED_INTERNALS)
    printed, _ = _emulate(tmp_path, str(script))
    assert printed == [True] * 7


@pytest.mark.skipif(KERAS3, reason="Keras 3 has no legacy (OptimizerV2) optimizers: keras."
                    "optimizer_v2 is unmapped")
@pytest.mark.slow
def test_a_tf2_script_with_an_optimizer_on_tf_2_4_internals_trains(tmp_path):
    """Before: ModuleNotFoundError: No module named 'keras.optimizer_v2' (then the
    distribution_strategy_context import and the ops names); now its OptimizerV2 subclass trains
    2 steps through NpuLossScaleOptimizer and sees TF 2.15's objects behind the old names."""
    printed, report = _emulate(tmp_path, INTERNALS_SCRIPT)
    assert (printed["optimizer"], printed["inner"]) == (LEGACY_CLASS_NAME, "PlainSGD")
    seen = printed["seen"]
    assert seen["dense_grad_is_tensor"] is True and seen["sparse_type"] == "IndexedSlices"
    assert isinstance(seen["cross_replica"], bool) and seen["strategy"]
    assert json.loads(report.read_text())["steps_applied"] == 2


@pytest.mark.skipif(KERAS3, reason="Keras 3 has no legacy (OptimizerV2) optimizers")
def test_npu_device_optimizer_around_a_legacy_optimizer_keeps_the_rank_agreement(npu_shim):  # pylint: disable=unused-argument
    """npu_device's NpuLossScaleOptimizer agrees over the opened device's ranks by default; the
    legacy class it builds for an OptimizerV2 does too, and at one rank decides alone."""
    import npu_device as npu  # pylint: disable=import-outside-toplevel
    from npu_device.train.optimizer import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    npu.open().as_default()
    opt = NpuLossScaleOptimizer(legacy_optimizers().SGD(0.5), initial_scale=4.0)
    assert type(opt).__name__ == LEGACY_CLASS_NAME
    assert isinstance(opt, NpuLossScaleOptimizer)
    assert opt._npu_check.is_distributed  # pylint: disable=protected-access
    weight = tf.Variable([1.0])

    @tf.function
    def step(grad):
        opt.apply_gradients([(grad, weight)])

    step(tf.constant([1.0]))
    assert weight.numpy().tolist() == [0.5] and float(opt.loss_scale) == 4.0
    step(tf.constant([np.inf], tf.float32))
    assert weight.numpy().tolist() == [0.5] and float(opt.loss_scale) == 2.0
    assert not bool(opt.last_step_finite.numpy())


@pytest.mark.skipif(KERAS3, reason="Keras 3 has no legacy (OptimizerV2) optimizers")
@pytest.mark.skipif(OPTIMIZER_V2_ONLY, reason=NO_SPLIT_REASON)
def test_npu_device_optimizer_converts_to_its_legacy_class_with_the_rank_agreement(npu_shim):  # pylint: disable=unused-argument
    """Keras 2's convert_to_legacy_optimizer gives npu_device's legacy class (not a string, not
    the package's class without the agreement), around the converted inner optimizer."""
    import keras  # pylint: disable=import-outside-toplevel
    from npu_device.train.optimizer import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5), initial_scale=16.0,
                                dynamic_growth_steps=5)
    converted = keras.__internal__.optimizers.convert_to_legacy_optimizer(opt)
    assert type(converted) is NpuLossScaleOptimizer._npu_legacy_class  # pylint: disable=protected-access
    assert converted._npu_check.is_distributed  # pylint: disable=protected-access
    assert isinstance(converted.inner_optimizer, tf.keras.optimizers.legacy.SGD)
    assert (converted.initial_scale, converted.dynamic_growth_steps) == (16.0, 5)
