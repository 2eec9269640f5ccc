"""npu-loss-scale doctor on TF2 scripts (tests/scripts/doctor/tf2_*.py): a GradScaler step in a
``tf.function``, Keras ``model.fit`` with the Keras ``NpuLossScaleOptimizer`` (overflowing at its
first scales, and clean), a custom loop with npu_device's optimizer, and a tf.function step
whose logged metric overflows. Each step's scale, next scale, skip and loss are recorded, the
run ends at ``--steps``, and a site with no path to the loss or the gradients of its step's
traced graph is benign.

Every expected number is worked out here from the scripts: the gradient reaching each script's
float16 value is the loss scale itself, so a scale overflows exactly when it exceeds float16's
largest finite value, and the scalers halve on an overflow (their growth comes after 2000 finite
steps, beyond these runs)."""
import os

import numpy as np
import pytest

from npu_loss_scale.pytest_plugin import run_doctor
from tf_versions import tf2_only

pytestmark = [pytest.mark.slow, tf2_only]

SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts", "doctor")
F16_MAX = 65504.0


def _doctor(factory, name, *args, steps, verify=False):
    out = factory.mktemp(name)
    return run_doctor(os.path.join(SCRIPTS, name + ".py"), *args, out=str(out), steps=steps,
                      modes="saturation", verify=verify)


def _halving_run(start, steps):
    """(scale used, skipped, next scale) per step when a scale above F16_MAX overflows and an
    overflow halves the scale."""
    out, scale = [], start
    for _ in range(steps):
        skipped = scale > F16_MAX
        after = scale / 2 if skipped else scale
        out.append((scale, skipped, after))
        scale = after
    return out


def _steps(report):
    steps = report["runs"]["saturation"]["steps"]
    return [(s["loss_scale"], s["skipped"], s["next_loss_scale"]) for s in steps], \
        [s["loss"] for s in steps]


def _f16(value):
    return float(np.float16(value))


def test_a_grad_scaler_step_in_a_tf_function_is_recorded(tmp_path_factory):
    report = _doctor(tmp_path_factory, "tf2_grad_scaler_function", steps=5)
    assert report["front_end"] == "GradScaler" and report["scaler"]["kind"] == "grad_scaler"
    assert report["outcome"] == "step_limit"          # the script would run 8 steps
    scales, losses = _steps(report)
    expected = _halving_run(2.0 ** 18, 5)
    assert scales == expected
    assert [s for _, s, _ in expected] == [True, True, True, False, False]
    # w = [1, -2] through float16 until the first applied step (SGD 0.1, gradient 1 each)
    assert losses == [-1.0] * 4 + [_f16(0.9) + _f16(-2.1)]
    # the start wastes as many steps as the scaler's rule skips before 2**15
    wasted = [f for f in report["findings"] if f["kind"] == "wasted_start"]
    assert len(wasted) == 1
    leading = next(i for i, (_, skipped, _) in enumerate(expected) if not skipped)
    assert wasted[0]["numbers"]["wasted_steps"] == [leading, leading] == [3, 3]
    site = report["sites"][0]
    assert len(report["sites"]) == 1 and site["dtype"] == "float16"
    assert site["steps"]["saturation"] == [1, 2, 3]
    # a path leads from the cast to the applied gradient: harmful or not, only a replay could
    # tell, and the doctor replays in a TF1 Session only
    assert site["verdict"]["saturation"] == {
        "verdict": "unknown", "method": "reachability", "evidence": "a path leads from %s to "
        "the loss or an applied gradient of the step's tf.function, stepped by a GradScaler; the "
        "doctor replays a step only in a TF1 Session" % site["op_name"]}


@pytest.fixture(scope="module")
def keras_fit(tmp_path_factory):
    return _doctor(tmp_path_factory, "tf2_keras_fit", steps=5)


def test_keras_fit_has_its_steps_recorded_and_stops_at_the_limit(keras_fit):
    assert keras_fit["front_end"] == "NpuLossScaleOptimizer (Keras)"
    assert keras_fit["scaler"] == {"kind": "keras", "settings": {
        "dynamic": True, "initial_scale": 2.0 ** 18}}
    assert keras_fit["outcome"] == "step_limit"       # fit would run 16 steps
    scales, losses = _steps(keras_fit)
    assert scales == _halving_run(2.0 ** 18, 5)
    # the weight (1) moves once a step is applied: 1 - 0.01 * 1, in float16
    assert losses == [1.0] * 4 + [_f16(0.99)]
    sites = [s["sites"] for s in keras_fit["runs"]["saturation"]["steps"]]
    assert [bool(names) for names in sites] == [True, True, True, False, False]
    verdict = keras_fit["sites"][0]["verdict"]["saturation"]
    assert (verdict["verdict"], verdict["method"]) == ("unknown", "reachability")
    assert "stepped by the Keras NpuLossScaleOptimizer, in model.fit" in verdict["evidence"]


def test_keras_fit_gets_the_keras_scaler_s_wasted_start(keras_fit):
    wasted = [f for f in keras_fit["findings"] if f["kind"] == "wasted_start"]
    assert len(wasted) == 1 and wasted[0]["numbers"]["wasted_steps"] == [3, 3]
    assert wasted[0]["fix"]["settings"] == {"initial_scale": 2.0 ** 15}


def test_the_keras_fit_start_setting_is_verified_by_a_re_run(tmp_path_factory):
    # from 2**20, five scales overflow (2**20 ... 2**16 > 65504): a warning, so the doctor
    # re-runs the script with the initial_scale it recommends (the first applied step's scale)
    report = _doctor(tmp_path_factory, "tf2_keras_fit", "--initial-scale", str(2.0 ** 20),
                     steps=7, verify=True)
    expected = _halving_run(2.0 ** 20, 7)
    leading = next(i for i, (_, skipped, _) in enumerate(expected) if not skipped)
    wasted = [f for f in report["findings"] if f["kind"] == "wasted_start"]
    assert len(wasted) == 1 and wasted[0]["severity"] == "warning"
    assert wasted[0]["numbers"]["wasted_steps"] == [leading, leading] == [5, 5]
    assert wasted[0]["fix"]["settings"] == {"initial_scale": expected[leading][0]}
    verified = wasted[0]["verified"]
    assert (verified["skipped_before"], verified["skipped_after"]) == (5, 0)
    assert verified["loss_scale_after"] == [2.0 ** 15] * 7


def test_a_clean_keras_fit_is_reported_clean(tmp_path_factory):
    report = _doctor(tmp_path_factory, "tf2_keras_fit", "--initial-scale", "1024", steps=4)
    assert report["outcome"] == "step_limit"
    scales, losses = _steps(report)
    assert scales == _halving_run(1024.0, 4) == [(1024.0, False, 1024.0)] * 4
    # every step applied: the float32 weight loses 0.01 (SGD, gradient 1) each time, and the
    # loss is the weight in float16
    weight, expected = np.float32(1.0), []
    for _ in range(4):
        expected.append(_f16(weight))
        weight = weight - np.float32(0.01)
    assert losses == expected
    assert report["sites"] == []
    assert [f["kind"] for f in report["findings"]].count("clean") == 1


def test_a_custom_loop_with_npu_device_s_optimizer_is_recorded(tmp_path_factory):
    report = _doctor(tmp_path_factory, "tf2_npu_device_loop", steps=4)
    assert report["front_end"] == "NpuLossScaleOptimizer (Keras)"
    assert report["outcome"] == "step_limit"
    scales, losses = _steps(report)
    assert scales == _halving_run(2.0 ** 17, 4)
    assert losses == [1.0] * 3 + [_f16(0.99)]


def test_a_tf_function_step_s_metric_overflow_is_benign_by_reachability(tmp_path_factory):
    # the float16 exp of a logged metric overflows (exp(20) > 65504) and reaches neither the
    # loss nor the gradients: benign; the gradient (2**10 through a float16 cast) is finite
    report = _doctor(tmp_path_factory, "tf2_grad_scaler_metric", steps=3)
    assert report["outcome"] == "step_limit"
    assert [s["op_name"] for s in report["sites"]] == ["Exp"]
    verdict = report["sites"][0]["verdict"]["saturation"]
    assert verdict == {"verdict": "benign", "method": "reachability", "evidence":
                       "no path from Exp to the loss or any applied gradient of the step's "
                       "tf.function, stepped by a GradScaler"}
    assert len([f for f in report["findings"] if f["kind"] == "benign_overflow"]) == 1
