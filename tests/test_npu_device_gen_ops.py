"""npu_device.gen_npu_ops on CPU: the device's dropout mask kernels and FastGelu, checked against
values computed here with NumPy and bit arithmetic written in the test (never by calling the
implementation): mask length, bit order, keep ratio, the 1/keep_prob scale in x's dtype, the
select (a dropped inf gives 0), seeds, gradients, the V3 byte masks in the device's fractal
order; every other kernel is named as not emulated; a TF2 script of the corpus's shape trains."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT_DIR = os.path.join(HERE, "scripts", "ascend_tf2_gen_npu_ops")
REPO = os.path.dirname(HERE)


@pytest.fixture
def gen_ops(npu_shim):  # pylint: disable=unused-argument
    from npu_device import gen_npu_ops  # pylint: disable=import-outside-toplevel
    return gen_npu_ops


def _mask_bytes(n):
    """The device's DropOutGenMask length: n bits rounded up to a multiple of 128, in bytes."""
    return ((n + 127) // 128) * 128 // 8


def _pack(keep):
    """Bit i of the flat keep vector -> bit i % 8 (least significant first) of byte i // 8."""
    keep = np.asarray(keep, bool).ravel()
    out = np.zeros(_mask_bytes(keep.size), np.uint8)
    for i, bit in enumerate(keep):
        if bit:
            out[i // 8] |= 1 << (i % 8)
    return out


def _unpack(mask, n):
    mask = np.asarray(mask, np.uint8)
    return np.array([(mask[i // 8] >> (i % 8)) & 1 for i in range(n)], bool)


# -- DropOutGenMask -----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [[1], [8], [127], [128], [129], [3, 50], [4, 8, 33]])
def test_gen_mask_is_uint8_with_one_bit_per_element_padded_to_128_bits(gen_ops, shape):
    n = int(np.prod(shape))
    eager = gen_ops.drop_out_gen_mask(shape, 0.5, 1, 2)
    assert eager.dtype == tf.uint8 and eager.shape == (_mask_bytes(n),)
    with tf.Graph().as_default():
        graph_mask = gen_ops.drop_out_gen_mask(tf.constant(shape, tf.int64), 0.5, 1, 2)
        assert graph_mask.shape.as_list() == [_mask_bytes(n)]


def test_gen_mask_sets_a_bit_with_probability_prob_and_keeps_or_drops_all_at_1_and_0(gen_ops):
    mask = gen_ops.drop_out_gen_mask([256, 512], 0.25, 7, 8).numpy()
    ones = np.unpackbits(mask).mean()  # the fraction of 1 bits, whatever their order
    assert abs(ones - 0.25) < 0.01
    assert np.all(gen_ops.drop_out_gen_mask([300], 1.0, 3, 4).numpy() == 0xFF)
    assert np.all(gen_ops.drop_out_gen_mask([300], 0.0, 3, 4).numpy() == 0)


def test_gen_mask_in_a_tf_function_with_an_unknown_batch(gen_ops):
    @tf.function(input_signature=[tf.TensorSpec([None, 10])])
    def mask_of(x):
        return gen_ops.drop_out_gen_mask(tf.shape(x), 0.5, 5, 6)
    assert mask_of(tf.zeros([13, 10])).shape == (_mask_bytes(130),)


def _first_masks(code):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


SEED_CODE = """
import json, tensorflow as tf
from npu_loss_scale.ascend import device_kernels as k
eager = [k.drop_out_gen_mask([512], 0.5, {s}, {s2}).numpy().tolist() for _ in range(2)]
g = tf.Graph()
with g.as_default():
    op = k.drop_out_gen_mask([512], 0.5, {s}, {s2})
    with tf.compat.v1.Session() as sess:
        graph = [sess.run(op).tolist() for _ in range(2)]
print(json.dumps({{"eager": eager, "graph": graph}}))
"""


@pytest.mark.slow
def test_seeds_zero_zero_draw_afresh_and_any_other_pair_repeats_the_stream_across_runs():
    fixed = [_first_masks(SEED_CODE.format(s=11, s2=22)) for _ in range(2)]
    assert fixed[0] == fixed[1]  # the same masks, in the same order, in another process
    for stream in (fixed[0]["eager"], fixed[0]["graph"]):
        assert stream[0] != stream[1]  # each run of the op continues the stream
    free = [_first_masks(SEED_CODE.format(s=0, s2=0)) for _ in range(2)]
    assert free[0]["eager"][0] != free[1]["eager"][0]
    assert free[0]["graph"][0] != free[1]["graph"][0]


def test_gen_mask_arguments_are_checked_by_name(gen_ops):
    with pytest.raises(ValueError, match=r"prob.*must be in \[0, 1\]; got 1.5"):
        gen_ops.drop_out_gen_mask([4], 1.5)
    with pytest.raises(TypeError, match="seed is an op attribute, a Python int"):
        gen_ops.drop_out_gen_mask([4], 0.5, seed=1.0)
    with pytest.raises(TypeError, match="shape must be int32 or int64"):
        gen_ops.drop_out_gen_mask(tf.constant([4.0]), 0.5)
    with pytest.raises(TypeError, match="prob must be float32 or float16"):
        gen_ops.drop_out_gen_mask([4], tf.constant(0.5, tf.float64))
    assert gen_ops.drop_out_gen_mask([4], 0.5, None, None).shape == (16,)  # None means 0


# -- DropOutDoMask ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_do_mask_scales_kept_elements_by_one_over_keep_prob_in_x_dtype(gen_ops, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 37)).astype(dtype)
    keep = rng.random(x.size) < 0.6
    mask = _pack(keep)
    y = gen_ops.drop_out_do_mask(tf.constant(x), tf.constant(mask), 0.3).numpy()
    scale = dtype(1) / dtype(0.3)  # 1/keep_prob in x's dtype, as the kernel does
    want = np.where(keep.reshape(x.shape), x * scale, dtype(0))
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, want)


def test_do_mask_reads_bits_least_significant_first(gen_ops):
    # only element 0 of byte 0 and element 10 (byte 1, bit 2) kept: 0b00000001, 0b00000100
    mask = np.zeros(16, np.uint8)
    mask[0], mask[1] = 1, 4
    y = gen_ops.drop_out_do_mask(tf.ones([16]), tf.constant(mask), 0.5).numpy()
    assert np.flatnonzero(y).tolist() == [0, 10]
    assert y[0] == y[10] == 2.0


def test_do_mask_selects_so_a_dropped_inf_or_nan_gives_zero(gen_ops):
    x = np.array([np.inf, np.nan, 1.0, np.inf], np.float32)
    mask = _pack([False, False, True, True])
    y = gen_ops.drop_out_do_mask(tf.constant(x), tf.constant(mask), 0.5).numpy()
    assert y[:3].tolist() == [0.0, 0.0, 2.0] and np.isinf(y[3])


def test_do_mask_gradient_is_the_mask_applied_to_the_incoming_gradient(gen_ops):
    keep = np.random.default_rng(1).random(40) < 0.5
    mask = tf.constant(_pack(keep))
    x = tf.Variable(np.arange(40, dtype=np.float32))

    @tf.function
    def grad_of():
        with tf.GradientTape() as tape:
            y = gen_ops.drop_out_do_mask(x, mask, 0.8)
            loss = tf.reduce_sum(y * tf.range(40, dtype=tf.float32))
        return tape.gradient(loss, x)
    np.testing.assert_allclose(grad_of().numpy(),
                               np.where(keep, np.arange(40) / np.float32(0.8), 0.0), rtol=1e-6)


def test_gen_and_do_mask_in_a_v1_graph(gen_ops):
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None, 20])
        y = gen_ops.drop_out_do_mask(x, gen_ops.drop_out_gen_mask(tf.shape(x), 0.5, 1, 1), 0.5)
        grad = tf.gradients(tf.reduce_sum(y), x)[0]
        with tf.compat.v1.Session(graph=graph) as sess:
            out, g = sess.run([y, grad], {x: np.ones((6, 20), np.float32)})
    assert set(np.unique(out)) <= {0.0, 2.0}
    np.testing.assert_array_equal(g, out)  # d(sum y)/dx = 1/keep where kept, 0 where dropped


def test_do_mask_arguments_are_checked_by_name(gen_ops):
    x = tf.ones([300], tf.float16)
    good = tf.constant(_pack(np.ones(300, bool)))
    with pytest.raises(TypeError, match="keep_prob has dtype float32 but x is float16"):
        gen_ops.drop_out_do_mask(x, good, tf.constant(0.5))
    with pytest.raises(TypeError, match="x must be float16 or float32"):
        gen_ops.drop_out_do_mask(tf.ones([300], tf.float64), good, 0.5)
    with pytest.raises(TypeError, match="mask must be uint8"):
        gen_ops.drop_out_do_mask(x, tf.cast(good, tf.int32), 0.5)
    with pytest.raises(ValueError, match="mask has 16 bytes; x of shape .* needs 48.*noise_shape"):
        gen_ops.drop_out_do_mask(x, tf.constant(_pack(np.ones(100, bool))), 0.5)

    @tf.function(input_signature=[tf.TensorSpec([None]), tf.TensorSpec([None], tf.uint8)])
    def dynamic(v, m):
        return gen_ops.drop_out_do_mask(v, m, 0.5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="byte count does not match"):
        dynamic(tf.ones([300]), tf.constant(_pack(np.ones(100, bool))))


# -- V3: byte masks -----------------------------------------------------------------------------------
def test_gen_mask_v3_is_a_byte_per_element_in_fractal_order_when_16_aligned(gen_ops):
    assert gen_ops.drop_out_gen_mask_v3([2, 32, 48], 0.5, 1, 2).shape == (2, 3, 2, 16, 16)
    assert gen_ops.drop_out_gen_mask_v3([5, 7], 0.5, 1, 2).shape == (48,)  # 35 rounded to 16
    assert gen_ops.drop_out_gen_mask_v3([40], 0.5, 1, 2).shape == (48,)
    values = gen_ops.drop_out_gen_mask_v3([64, 64], 0.3, 3, 4).numpy()
    assert set(np.unique(values)) <= {0, 1} and abs(values.mean() - 0.3) < 0.03


def _to_fractal(nd):
    """[B, M, N] -> [B, N/16, M/16, 16, 16] with [b, n1, m1, m0, n0] = nd[b, 16*m1+m0, 16*n1+n0]."""
    b, m, n = nd.shape
    out = np.zeros((b, n // 16, m // 16, 16, 16), nd.dtype)
    for bi in range(b):
        for row in range(m):
            for col in range(n):
                out[bi, col // 16, row // 16, row % 16, col % 16] = nd[bi, row, col]
    return out


def test_do_mask_v3_reads_a_fractal_mask_in_the_devices_order(gen_ops):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 32, 48)).astype(np.float32)
    keep = (rng.random(x.shape) < 0.5).astype(np.uint8)
    y = gen_ops.drop_out_do_mask_v3(tf.constant(x), tf.constant(_to_fractal(keep)), 0.25).numpy()
    np.testing.assert_allclose(y, x * keep * np.float32(4.0), rtol=1e-6)
    flat_x = rng.standard_normal((5, 7)).astype(np.float32)
    flat_keep = (rng.random(48) < 0.5).astype(np.uint8)
    y = gen_ops.drop_out_do_mask_v3(tf.constant(flat_x), tf.constant(flat_keep), 0.5).numpy()
    np.testing.assert_allclose(y, flat_x * flat_keep[:35].reshape(5, 7) * 2.0, rtol=1e-6)


def test_do_mask_v3_multiplies_so_a_dropped_nan_stays_nan_and_checks_the_mask(gen_ops):
    y = gen_ops.drop_out_do_mask_v3(tf.constant([np.nan, 1.0]),
                                    tf.constant(np.array([0, 1] + [0] * 14, np.uint8)), 0.5)
    assert np.isnan(y.numpy()[0]) and y.numpy()[1] == 2.0
    with pytest.raises(ValueError, match="mask has 32 bytes; x of shape .* needs 16"):
        gen_ops.drop_out_do_mask_v3(tf.ones([5]), tf.zeros([32], tf.uint8), 0.5)
    with pytest.raises(ValueError, match="fractal mask for x of shape"):
        gen_ops.drop_out_do_mask_v3(tf.ones([32, 32]), tf.zeros([1, 2, 16, 16], tf.uint8), 0.5)


@pytest.mark.slow
def test_v3_pair_with_a_dynamic_shape_and_its_gradient(gen_ops):
    @tf.function(input_signature=[tf.TensorSpec(None)])
    def run(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = gen_ops.drop_out_do_mask_v3(v, gen_ops.drop_out_gen_mask_v3(tf.shape(v), 0.5),
                                            0.5)
        return y, tape.gradient(y, v)
    for shape in ([3, 32, 16], [3, 5]):
        y, g = (t.numpy() for t in run(tf.ones(shape)))
        assert y.shape == tuple(shape) and set(np.unique(y)) <= {0.0, 2.0}
        np.testing.assert_array_equal(g, y)


# -- FastGelu -----------------------------------------------------------------------------------------
def _fast_gelu(x):
    return x / (1 + np.exp(-1.702 * np.abs(x))) * np.exp(0.851 * (x - np.abs(x)))


def test_fast_gelu_and_its_grad_are_the_devices_formula(gen_ops):
    x = np.linspace(-12, 12, 241)
    np.testing.assert_allclose(gen_ops.fast_gelu(tf.constant(x)).numpy(), _fast_gelu(x),
                               rtol=1e-12, atol=1e-14)
    h = 1e-6
    numeric = (_fast_gelu(x + h) - _fast_gelu(x - h)) / (2 * h)
    dy = np.cos(x)
    np.testing.assert_allclose(gen_ops.fast_gelu_grad(tf.constant(dy), tf.constant(x)).numpy(),
                               dy * numeric, rtol=1e-6, atol=1e-9)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = gen_ops.fast_gelu(xt)
    np.testing.assert_allclose(tape.gradient(y, xt).numpy(), numeric, rtol=1e-6, atol=1e-9)
    assert gen_ops.fast_gelu(tf.constant([-30.0, 30.0], tf.float16)).numpy().tolist() == [0, 30]
    with pytest.raises(TypeError, match="gradients .* and features .* must have one dtype"):
        gen_ops.fast_gelu_grad(tf.ones([2], tf.float16), tf.ones([2]))


def test_npu_device_ops_gelu_is_exact_eagerly_and_the_fast_form_when_traced(npu_shim):  # pylint: disable=unused-argument
    import npu_device  # pylint: disable=import-outside-toplevel
    from scipy.special import erf  # pylint: disable=import-outside-toplevel
    x = np.linspace(-4, 4, 17)
    np.testing.assert_allclose(npu_device.ops.gelu(tf.constant(x)).numpy(),
                               0.5 * x * (1 + erf(x / np.sqrt(2))), rtol=1e-6, atol=1e-9)
    traced = tf.function(npu_device.ops.gelu)(tf.constant(x)).numpy()
    np.testing.assert_allclose(traced, _fast_gelu(x), rtol=1e-12, atol=1e-14)


# -- the rest of the library, and where else the kernels appear ----------------------------------------
def test_other_kernels_raise_not_emulated_naming_them(gen_ops):
    from npu_bridge._shim import NotEmulatedError  # pylint: disable=import-outside-toplevel
    for name in ("lars_v2", "basic_lstm_cell", "dynamic_rnn_grad", "fused_layer_norm",
                 "lamb_apply_weight_assign"):
        with pytest.raises(NotEmulatedError, match=r"npu_device\.gen_npu_ops\.%s is not emulated"
                                                   r".*provides: drop_out_do_mask" % name):
            getattr(gen_ops, name)
    with pytest.raises(ImportError, match=r"gen_npu_ops\.adam_apply_one_assign is not emulated"):
        exec("from npu_device.gen_npu_ops import adam_apply_one_assign", {})  # pylint: disable=exec-used
    with pytest.raises(ImportError, match=r"npu_device\.ops\.swish is not emulated"):
        exec("from npu_device.ops import swish", {})  # pylint: disable=exec-used


def test_the_same_kernels_under_every_name_scripts_use(gen_ops):
    import npu_device  # pylint: disable=import-outside-toplevel
    from npu_device.npu_device import (  # pylint: disable=import-outside-toplevel
        gen_npu_ops as aicore)
    from npu_bridge.helper import helper  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.ascend import device_kernels  # pylint: disable=import-outside-toplevel
    assert aicore is gen_ops is npu_device.gen_npu_ops
    tf1_library = helper.get_gen_ops()
    for name in ("drop_out_gen_mask", "drop_out_do_mask", "drop_out_gen_mask_v3",
                 "drop_out_do_mask_v3", "fast_gelu", "fast_gelu_grad"):
        assert getattr(gen_ops, name) is getattr(device_kernels, name)
        assert getattr(tf1_library, name) is getattr(device_kernels, name)


def test_npu_bridge_dropout_is_the_gen_and_do_mask_pair_with_tf_seeds(npu_shim):  # pylint: disable=unused-argument
    from npu_bridge.estimator import npu_ops  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.ascend import device_kernels  # pylint: disable=import-outside-toplevel
    x = np.random.default_rng(3).standard_normal((9, 31)).astype(np.float32)
    outs = []
    for build in (lambda v: npu_ops.dropout(v, 0.6, seed=7),
                  lambda v: device_kernels.drop_out_do_mask(
                      v, device_kernels.drop_out_gen_mask(tf.shape(v), 0.6, 5, 7), 0.6)):
        with tf.Graph().as_default() as graph:
            tf.compat.v1.set_random_seed(5)  # get_seed(7) -> (5, 7)
            y = build(tf.constant(x))
            with tf.compat.v1.Session(graph=graph) as sess:
                outs.append(sess.run(y))
    np.testing.assert_array_equal(outs[0], outs[1])
    kept = outs[0] != 0
    np.testing.assert_allclose(outs[0][kept], x[kept] / np.float32(0.6), rtol=1e-6)
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="noise_shape .* differs from x's shape"):
            npu_ops.dropout(tf.ones([4, 6]), 0.5, noise_shape=[4, 1])


def test_user_gradient_registrations_for_the_device_op_types_still_work(npu_shim):  # pylint: disable=unused-argument
    # the shim registers none itself: a script's unconditional RegisterGradient does not collide
    import npu_device  # pylint: disable=import-outside-toplevel,unused-import
    from npu_device import (  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        gen_npu_ops, ops)
    from tensorflow.python.framework import ops as tf_ops  # pylint: disable=import-outside-toplevel
    registered = tf_ops.gradient_registry.list()
    assert not {"DropOutDoMask", "DropOutDoMaskV3", "FastGelu"} & set(registered)


# -- a TF2 script in the corpus's shape, through the emulate entry point --------------------------------
@pytest.mark.slow
def test_tf2_script_with_a_vendored_npu_ops_trains_through_the_emulator(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("RANK_SIZE", None)
    run = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate",
                          os.path.join(SCRIPT_DIR, "train.py")], cwd=SCRIPT_DIR, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    grads = {e["kind"]: e for e in events if e["event"] == "grad"}
    for kind in ("dropout", "dropout_v3"):
        assert grads[kind]["out_ok"] and grads[kind]["grad_ok"], grads[kind]
        assert 0.6 < grads[kind]["kept_fraction"] < 0.9
    gelu = next(e for e in events if e["event"] == "fast_gelu")
    x = np.linspace(-3, 3, 7)
    np.testing.assert_allclose(gelu["y"], _fast_gelu(x), rtol=1e-5, atol=1e-6)
    fit = next(e for e in events if e["event"] == "fit")["losses"]
    assert np.all(np.isfinite(fit)) and fit[-1] < fit[0]
    custom = next(e for e in events if e["event"] == "custom")
    assert custom["all_finite"] and custom["last"] < 0.5 * custom["first"]
