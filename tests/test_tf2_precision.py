"""precision_mode for TF2 code: eager ops, tf.function / Keras graphs, their gradients.

Expected values come from NumPy (float16 rounding written here: round, then inf -> +-65504 as the
device saturates) or from hand arithmetic, never from the package.
"""
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import precision

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "ascend_tf2_precision_mode.py")
F16_MAX = 65504.0


@pytest.fixture
def device():
    """The emulated register cleared; the op precision (and its patches) removed afterwards."""
    emulation.npu_clear_float_status_v2()
    yield
    precision.uninstall_op_precision()
    emulation.npu_clear_float_status_v2()


def overflowed():
    return bool(np.any(emulation.npu_get_float_status_v2().numpy()))


def f16(a):
    """NumPy float16 rounding with the device's saturation (inf -> +-MAX, NaN -> 0), as float64."""
    with np.errstate(over="ignore"):
        r = np.asarray(a, np.float64).astype(np.float16).astype(np.float64)
    r = np.where(np.isnan(r), 0.0, r)
    return np.clip(r, -F16_MAX, F16_MAX)


X = np.array([[300.0, 1.0]], np.float32)
W = np.array([[300.0], [1.0]], np.float32)    # 300*300 + 1 = 90001: beyond float16's 65504


def eager_matmul():
    return tf.matmul(X, W).numpy()[0, 0]


@tf.function
def function_matmul():
    return tf.matmul(tf.constant(X), tf.constant(W))[0, 0]


@tf.function
def loop_matmul():
    """The matmul inside a TF2 while loop body (a function graph of its own)."""
    def body(i, acc):
        return i + 1, acc + tf.matmul(tf.constant(X), tf.constant(W))[0, 0]
    return tf.while_loop(lambda i, acc: i < 1, body, [tf.constant(0), tf.constant(0.0)])[1]


@pytest.mark.parametrize("run", [eager_matmul, function_matmul, loop_matmul],
                         ids=["eager", "tf.function", "while-body"])
@pytest.mark.parametrize("mode, want, flagged", [
    ("allow_mix_precision", F16_MAX, True),     # float16 result, saturated, register set
    ("allow_fp32_to_fp16", F16_MAX, True),
    ("allow_mix_precision_fp16", F16_MAX, True),
    ("force_fp16", F16_MAX, True),
    ("cube_fp16in_fp32out", 90001.0, False),    # exact float16 operands, float32 result
    ("allow_mix_precision_bf16", 90112.0, False),  # bfloat16: 8 significant bits, 176 * 512
    ("force_fp32", 90001.0, False),
    ("must_keep_origin_dtype", 90001.0, False),
])
def test_a_matmul_computes_as_the_mode_says_eagerly_and_in_graphs(device, run, mode, want,
                                                                    flagged):
    assert run() == 90001.0 and not overflowed()       # float32 before the mode is installed
    precision.install_op_precision(mode)
    if run is not eager_matmul:
        run = tf.function(run.python_function)          # traced anew, after the install
    assert run() == want
    assert overflowed() is flagged


def test_a_plain_run_installs_no_op_precision(device, monkeypatch):
    """npu-emulate --plain (NPU_LOSS_SCALE_PLAIN): npu_device's mode is not applied."""
    monkeypatch.setenv("NPU_LOSS_SCALE_PLAIN", "1")
    assert precision.install_op_precision("allow_mix_precision") == "allow_mix_precision"
    assert tf.function(function_matmul.python_function)() == 90001.0 and not overflowed()
    monkeypatch.setenv("NPU_LOSS_SCALE_PLAIN", "0")       # "0" is not plain
    precision.install_op_precision("allow_mix_precision")
    assert tf.function(function_matmul.python_function)() == F16_MAX and overflowed()


@pytest.mark.parametrize("mode", ["cube_fp16in_fp32out", "allow_mix_precision"])
def test_operands_are_rounded_to_float16_before_the_product(device, mode):
    """cube_fp16in_fp32out keeps a float32 result, so only operand rounding can make it 3.0."""
    a = np.float32(1.0 + 2.0 ** -11)      # below float16's precision at 1: rounds to 1.0
    b = np.float32(3.0)
    assert tf.matmul([[a]], [[b]]).numpy()[0, 0] == np.float32(a * b) != 3.0
    precision.install_op_precision(mode)
    assert tf.matmul([[a]], [[b]]).numpy()[0, 0] == 3.0
    x, y = tf.constant([[a]]), tf.constant([[b]])
    assert tf.function(lambda: tf.matmul(x, y))().numpy()[0, 0] == 3.0
    precision.uninstall_op_precision()
    assert tf.matmul([[a]], [[b]]).numpy()[0, 0] == np.float32(a * b)


# -- gradients, against a NumPy reference --------------------------------------------------------
XS = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) + 2.0 ** -13    # offsets float16 drops
WS = np.array([[0.5, 0.75], [1.25, 1.5], [2.0, 2.5]]) + 2.0 ** -13
C = np.array([[3.0, 5.0], [7.0, 11.0]])


def reference(c_scale):
    """y = f16(f16(x) @ f16(w)); loss = sum(y * c): dW = f16(f16(x)^T @ f16(c)), dx likewise."""
    x16, w16, c16 = f16(XS), f16(WS), f16(C * c_scale)
    return f16(x16 @ w16), f16(x16.T @ c16), f16(c16 @ w16.T)


def tape_step(x, w, c):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.matmul(x, w)
        loss = tf.reduce_sum(y * c)
    dx, dw = tape.gradient(loss, [x, w])
    return y, dw, dx


def symbolic_step(x, w, c):
    y = tf.matmul(x, w)
    dx, dw = tf.gradients(tf.reduce_sum(y * c), [x, w])
    return y, dw, dx


@pytest.mark.parametrize("how", ["eager tape", "tape in tf.function", "tf.gradients"])
@pytest.mark.parametrize("c_scale, backward_overflows", [(1.0, False), (2.0 ** 12, True)])
def test_forward_and_backward_matmuls_match_float16_arithmetic(device, how, c_scale,
                                                              backward_overflows):
    precision.install_op_precision("allow_mix_precision")
    x = tf.constant(XS, tf.float32)
    w = tf.Variable(WS.astype(np.float32))
    c = tf.constant(C * c_scale, tf.float32)
    if how == "eager tape":
        got = tape_step(x, w, c)
    elif how == "tape in tf.function":
        got = tf.function(tape_step)(x, w, c)
    else:
        got = tf.function(symbolic_step)(x, w, c)
    want = reference(c_scale)
    for name, g, r in zip(("y", "dw", "dx"), got, want):
        np.testing.assert_array_equal(g.numpy().astype(np.float64), r, err_msg=name)
    assert overflowed() is backward_overflows   # 2**12 * 11 * 6: beyond 65504 in dW only
    if backward_overflows:
        assert np.max(np.abs(want[1])) == F16_MAX and np.max(np.abs(want[0])) < F16_MAX


def _conv_reference(image, kernel):
    """VALID 2-D convolution (cross-correlation), NHWC / HWIO with one channel, in float64."""
    h, w = image.shape[1] - kernel.shape[0] + 1, image.shape[2] - kernel.shape[1] + 1
    out = np.zeros((1, h, w, 1))
    for i in range(h):
        for j in range(w):
            out[0, i, j, 0] = np.sum(image[0, i:i + kernel.shape[0], j:j + kernel.shape[1], 0] *
                                     kernel[:, :, 0, 0])
    return out


def test_convolution_and_its_filter_gradient_compute_in_float16(device):
    rng = np.random.default_rng(3)
    image = rng.integers(-8, 8, (1, 4, 4, 1)) + 2.0 ** -13
    kernel = rng.integers(-4, 4, (2, 2, 1, 1)) * 0.25 + 2.0 ** -13
    precision.install_op_precision("allow_fp32_to_fp16")
    x = tf.constant(image, tf.float32)
    k = tf.Variable(kernel.astype(np.float32))
    with tf.GradientTape() as tape:
        y = tf.nn.conv2d(x, k, 1, "VALID")
        loss = tf.reduce_sum(y)
    dk = tape.gradient(loss, k)
    np.testing.assert_array_equal(y.numpy(), f16(_conv_reference(f16(image), f16(kernel))))
    # d loss / d kernel[a, b] = sum of the image window at offset (a, b): a convolution of the
    # rounded image with ones
    ones = np.ones((3, 3, 1, 1))
    want = np.array([[_conv_reference(f16(image)[:, a:a + 3, b:b + 3], ones)[0, 0, 0, 0]
                      for b in range(2)] for a in range(2)]).reshape(2, 2, 1, 1)
    np.testing.assert_array_equal(dk.numpy(), f16(want))
    assert not overflowed()


# -- scope: every thread, not tf.compat.v1 graphs, uninstall --------------------------------------
def test_ops_built_in_another_thread_get_the_mode(device):
    precision.install_op_precision("allow_mix_precision")
    out = []
    worker = threading.Thread(target=lambda: out.append(float(function_matmul.python_function())))
    worker.start()
    worker.join()
    traced = []
    worker = threading.Thread(
        target=lambda: traced.append(float(tf.function(function_matmul.python_function)())))
    worker.start()
    worker.join()
    assert out == [F16_MAX] and traced == [F16_MAX]


def test_tf_compat_v1_graphs_are_left_to_their_sessions(device):
    precision.install_op_precision("allow_mix_precision")
    with tf.Graph().as_default() as g:
        y = tf.matmul(tf.constant(X), tf.constant(W))
        assert all(op.type != "Cast" for op in g.get_operations())
        with tf.compat.v1.Session() as sess:       # no precision in its config: as written
            assert sess.run(y)[0, 0] == 90001.0


def test_uninstall_puts_back_what_it_replaced_even_around_op_callbacks(device):
    from tensorflow.python import pywrap_tfe  # pylint: disable=import-outside-toplevel
    from tensorflow.python.eager import execute  # pylint: disable=import-outside-toplevel
    from tensorflow.python.framework import (  # pylint: disable=import-outside-toplevel
        op_def_library)
    from npu_loss_scale.device import saturation  # pylint: disable=import-outside-toplevel
    originals = (op_def_library._apply_op_helper, pywrap_tfe.TFE_Py_FastPathExecute,  # pylint: disable=protected-access
                 execute.quick_execute, execute.execute)
    precision.install_op_precision("allow_mix_precision")
    with saturation.saturate_every_op():      # op callbacks on: TF swaps execute.execute
        assert eager_matmul() == F16_MAX
    assert eager_matmul() == F16_MAX          # and swaps it back: still rounded
    precision.uninstall_op_precision()
    assert (op_def_library._apply_op_helper, pywrap_tfe.TFE_Py_FastPathExecute,  # pylint: disable=protected-access
            execute.quick_execute, execute.execute) == originals
    assert eager_matmul() == 90001.0


def test_op_precision_context_restores_the_previous_mode(device):
    with precision.op_precision("cube_fp16in_fp32out"):
        with precision.op_precision("allow_mix_precision"):
            assert eager_matmul() == F16_MAX
        assert precision.op_precision_mode() == "cube_fp16in_fp32out"
    assert precision.op_precision_mode() is None
    with pytest.raises(ValueError, match="precision_mode must be one of .*got 'half'"):
        precision.install_op_precision("half")
    assert precision.op_precision_mode() is None


# -- unmodified scripts ---------------------------------------------------------------------------
def _emulate(args, cwd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for name in ("RANK_SIZE", "RANK_ID", "NPU_LOSS_SCALE_SAT_MODE"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate"] + args, env=env,
                            cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_keras_script_with_mix_precision_in_npu_device_options_exercises_the_loss_scaler(
        tmp_path):
    """A float32 Keras model: in float32 a scale of 2**20 never overflows; with the device's
    allow_mix_precision the backward matmuls overflow float16 until the scale is small enough,
    each overflow skips its step and halves the scale."""
    report = tmp_path / "report.json"
    mixed = _emulate(["--report", str(report), SCRIPT, "allow_mix_precision"], str(tmp_path))
    fp32 = _emulate([SCRIPT, "force_fp32"], str(tmp_path))
    assert all(e["finite"] and e["weights_moved"] and e["scale_before"] == 2.0 ** 20
               for e in fp32) and len(fp32) == 8
    skipped = [e for e in mixed if not e["finite"]]
    assert skipped and all(not e["weights_moved"] for e in skipped)
    assert mixed[0]["finite"] is False
    scales = [e["scale_before"] for e in mixed]
    for before, after, event in zip(scales, scales[1:], mixed):
        assert after == (before / 2 if not event["finite"] else before)
    assert mixed[-1]["finite"] and mixed[-1]["weights_moved"]
    # the emulate report counts the Keras optimizer's steps as it counts npu_bridge's
    counts = json.loads(report.read_text())
    assert (counts["optimizers_built"], counts["steps_applied"], counts["steps_skipped"]) == (
        1, len(mixed) - len(skipped), len(skipped))


@pytest.mark.slow
def test_emulate_precision_mode_applies_to_a_tf2_script_without_npu_device(tmp_path):
    script = tmp_path / "plain_tf2.py"
    script.write_text(
        "import tensorflow as tf\n"
        "x = tf.constant([[300.0, 1.0]]); w = tf.constant([[300.0], [1.0]])\n"
        "print('{\"eager\": %s, \"function\": %s}' % (float(tf.matmul(x, w)[0, 0]),\n"
        "      float(tf.function(lambda: tf.matmul(x, w))()[0, 0])))\n")
    assert _emulate([str(script)], str(tmp_path)) == [{"eager": 90001.0, "function": 90001.0}]
    assert _emulate(["--precision-mode", "allow_mix_precision", str(script)], str(tmp_path)) == [
        {"eager": F16_MAX, "function": F16_MAX}]
