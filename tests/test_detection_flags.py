"""Which gradient values count as overflowed, per backend and overflow mode: one decision
(``OverflowDetector.value_test``) that GradScaler, Keras and NPULossScaleOptimizer share.

Expected answers come from NumPy (``np.isfinite``, ``np.finfo``), not from the package."""
import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale.detection import backends, flags
from npu_loss_scale.detection.step import OverflowCheck
from npu_loss_scale.device import register as emulation

F16_MAX = float(np.finfo(np.float16).max)
VALUES = {"clean": 3.0, "at_max": F16_MAX, "inf": np.inf, "nan": np.nan}


def _numpy_says(value, max_counts):
    """The hand rule: inf and NaN always count; ±MAX only where saturation can leave it."""
    value = np.float16(value)
    return bool(not np.isfinite(value) or (max_counts and abs(value) >= np.finfo(np.float16).max))


def _counted(test, value):
    grads = [None, tf.constant([1.0, value, -2.0], tf.float16), tf.constant([7], tf.int32)]
    return float(flags.count(grads, test).numpy())


@pytest.mark.parametrize("name", sorted(VALUES))
@pytest.mark.parametrize("backend,inf_nan_mode,count_saturated,max_counts", [
    ("emulation", False, True, True),     # a front end's scaled values: ±MAX is saturation
    ("emulation", False, False, False),   # NPULossScaleOptimizer: saturate() recorded it
    ("emulation", True, True, False),     # INF/NaN mode: IEEE values, ±MAX is a value
    ("inf_nan", False, True, False),
    ("inf_nan", True, False, False),
])
def test_each_backend_counts_the_values_numpy_says(name, backend, inf_nan_mode, count_saturated,
                                                   max_counts):
    previous = emulation.set_device_sat_mode(emulation.INF_NAN if inf_nan_mode
                                             else emulation.SATURATION)
    try:
        test = backends.make_detector(backend).value_test(count_saturated=count_saturated)
        expected = 1.0 if _numpy_says(VALUES[name], max_counts) else 0.0
        assert _counted(test, VALUES[name]) == expected
    finally:
        emulation.set_device_sat_mode(previous)


@pytest.mark.parametrize("backend,inf_nan_mode,uses", [
    ("emulation", False, True), ("emulation", True, False),
    ("inf_nan", False, False), ("inf_nan", True, False)])
def test_a_step_reads_the_register_only_where_one_answers(backend, inf_nan_mode, uses):
    previous = emulation.set_device_sat_mode(emulation.INF_NAN if inf_nan_mode
                                             else emulation.SATURATION)
    try:
        step = OverflowCheck(backend).start()
        assert step.uses_register() is uses
        emulation.record(True)           # an overflow the register holds
        flag = float(step.end(step.read()).numpy())
        assert flag == (1.0 if uses else 0.0)
        if uses:                         # the end cleared what the read saw
            assert not np.any(emulation.npu_get_float_status_v2().numpy())
    finally:
        emulation.npu_clear_float_status_v2()
        emulation.set_device_sat_mode(previous)
