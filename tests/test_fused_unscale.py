"""The fused unscale-and-check kernel (npu_loss_scale._internal.kernels): one pass that unscales a
gradient and says whether it held an inf or a NaN.

Expected values come from NumPy (the product rounded as TensorFlow's Mul rounds it, the check
from np.isfinite); the kernel is built from its source in a fresh cache folder."""
import warnings

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale._internal import kernels as _kernels
from npu_loss_scale.scaling.unscale import Reciprocal
from tf_versions import evaluate


@pytest.fixture
def fresh_kernel_state():
    _kernels._reset_for_tests()  # pylint: disable=protected-access
    yield
    _kernels._reset_for_tests()  # pylint: disable=protected-access


def _op(monkeypatch):
    monkeypatch.setenv(_kernels.ENV_MODE, "on")
    module = _kernels.load_unscale_check()
    assert module is not None
    return module.nls_unscale_and_check


def _expected(x, factors, dtype):
    """NumPy's x * first * second (left to right; float16/bfloat16 in float32, then rounded
    back by TensorFlow's cast). NumPy does not flush subnormals, so nothing hides a flush."""
    first, second = (np.float32(f) for f in factors)
    if dtype == tf.float64:
        return x * np.float64(first) * np.float64(second)
    wide = evaluate(lambda: tf.cast(tf.constant(x), tf.float32)) * first * second
    return evaluate(lambda: tf.cast(tf.constant(wide), dtype))


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
@pytest.mark.parametrize("size", [1, 7, 40_000, 1_000_003])
def test_the_product_is_bitwise_tensorflows_and_the_check_finds_every_inf_and_nan(
        dtype, size, monkeypatch, fresh_kernel_state):
    op = _op(monkeypatch)
    rng = np.random.RandomState(size)
    x = evaluate(lambda: tf.cast(tf.constant(rng.randn(size) * 100), dtype))
    cases = [(x, (1.0, 2.0 ** -15)), (x, (1.0, 0.3)), (x, (1.0, 1.0))]
    if dtype != tf.float16:   # the split factors of scales above 2**126, on such scaled values
        big = evaluate(lambda: tf.cast(tf.constant(x.astype(np.float64) * 2.0 ** 110), dtype))
        cases += [(big, (2.0 ** -64, 2.0 ** -63)),
                  (big, (2.0 ** -64, np.float32(2.0 ** 64) / np.float32(3e38)))]
    for values, factors in cases:
        got, check = evaluate(lambda: op(tf.constant(values), np.float32(factors)))
        want = _expected(values, factors, dtype)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        assert check == 0.0
    for bad in (np.inf, -np.inf, np.nan):
        for where in sorted({0, size // 2, size - 1}):
            y = x.copy()
            y[where] = bad
            _, check = evaluate(lambda: op(tf.constant(y), np.float32([1.0, 0.5])))
            assert np.isnan(check), (bad, where)


def test_largest_finite_values_are_not_flagged(monkeypatch, fresh_kernel_state):
    op = _op(monkeypatch)
    for dtype, big in ((np.float16, 65504.0), (np.float32, 3.4028235e38)):
        x = np.full(50_000, big, dtype)
        x[::2] *= -1
        _, check = evaluate(lambda: op(tf.constant(x), np.float32([1.0, 1.0])))
        assert check == 0.0


def test_the_optimizer_uses_one_fused_op_per_gradient_and_skips_like_the_two_pass_path(
        monkeypatch, fresh_kernel_state):
    results = {}
    for fused in ("on", "off"):
        monkeypatch.setenv(_kernels.ENV_MODE, fused)
        with tf.Graph().as_default() as graph:
            w = tf.compat.v1.get_variable("w", initializer=np.ones([64, 8], np.float32))
            e = tf.compat.v1.get_variable("e", initializer=np.ones([100, 8], np.float32))
            x = tf.compat.v1.placeholder(tf.float32, [64, 8])
            ids = tf.constant([3, 5, 5])
            loss = tf.reduce_sum(w * x) + tf.reduce_sum(tf.gather(e, ids) * x[:3])
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                            nls.FixedLossScaleManager(2 ** 10),
                                            backend="inf_nan")
            train = opt.minimize(loss)
            kinds = [op.type for op in graph.get_operations()]
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                feeds = [np.full([64, 8], 0.25, np.float32), np.full([64, 8], np.inf, np.float32),
                         np.full([64, 8], -1.0, np.float32)]
                for feed in feeds:
                    sess.run(train, {x: feed})
                results[fused] = (sess.run([w, e]), sess.run(opt.skipped_steps),
                                  kinds.count("NlsUnscaleAndCheck"))
    (w_on, e_on), skipped_on, fused_ops = results["on"]
    (w_off, e_off), skipped_off, no_fused = results["off"]
    assert fused_ops == 2 and no_fused == 0      # the dense and the sparse (IndexedSlices) one
    assert skipped_on == skipped_off == 1
    np.testing.assert_array_equal(w_on, w_off)
    np.testing.assert_array_equal(e_on, e_off)
    np.testing.assert_array_equal(w_on, np.ones([64, 8], np.float32) - 0.5 * (0.25 - 1.0))


def test_a_failed_build_warns_once_and_the_two_pass_path_runs(
        monkeypatch, tmp_path, fresh_kernel_state):
    monkeypatch.setenv(_kernels.ENV_MODE, "auto")
    monkeypatch.setenv(_kernels.ENV_CACHE, str(tmp_path))         # nothing built there yet
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(_kernels.shutil, "which", lambda name: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _kernels.load_unscale_check() is None
        assert _kernels.load_unscale_check() is None
    assert [w.category for w in caught] == [_kernels.FusedKernelWarning]
    assert "no C++ compiler" in str(caught[0].message)
    with tf.Graph().as_default() as graph:
        w = tf.compat.v1.get_variable("w", initializer=[1.0, 2.0])
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                        nls.FixedLossScaleManager(8), backend="inf_nan")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.minimize(tf.reduce_sum(w * w))
        kinds = [op.type for op in graph.get_operations()]
    assert "NlsUnscaleAndCheck" not in kinds and "Sum" in kinds


def test_mode_on_with_a_failed_build_raises_and_a_bad_mode_is_named(
        monkeypatch, tmp_path, fresh_kernel_state):
    monkeypatch.setenv(_kernels.ENV_CACHE, str(tmp_path))
    monkeypatch.setattr(_kernels.shutil, "which", lambda name: None)
    monkeypatch.setenv(_kernels.ENV_MODE, "on")
    with pytest.raises(_kernels.FusedKernelError, match="NPU_LOSS_SCALE_FUSED_UNSCALE=on.*"
                                                        "no C\\+\\+ compiler"):
        _kernels.load_unscale_check()
    monkeypatch.setenv(_kernels.ENV_MODE, "fast")
    with pytest.raises(ValueError, match="NPU_LOSS_SCALE_FUSED_UNSCALE must be one of auto, "
                                         "on, off; got 'fast'"):
        _kernels.load_unscale_check()


def test_a_compiler_error_is_reported_with_its_message(monkeypatch, tmp_path, fresh_kernel_state):
    fake = tmp_path / "cxx"
    fake.write_text("#!/bin/sh\necho 'fatal: cannot build here' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv(_kernels.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setenv(_kernels.ENV_MODE, "on")
    with pytest.raises(_kernels.FusedKernelError, match="compiler exit 3: fatal: cannot build"):
        _kernels.load_unscale_check()
    assert not list((tmp_path / "cache" / "kernels").glob("*.so*"))   # no half-written library


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float32, tf.float64])
@pytest.mark.parametrize("exponent", [126, 127])
def test_a_scale_whose_reciprocal_is_subnormal_unscales_exactly(dtype, exponent, monkeypatch,
                                                                 fresh_kernel_state):
    """At 2**126 and 2**127 the kernel, given Reciprocal.of(scale)'s factors, gives back the
    gradient itself (the NumPy float64 value of g*S/S), nothing flushed to zero."""
    op = _op(monkeypatch)
    g = evaluate(lambda: tf.cast(
        tf.constant(np.random.RandomState(exponent).uniform(-1, 1, 50_000)), dtype))
    # |g| <= 1: g * 2**127 is finite
    scaled = (g.astype(np.float64) * 2.0 ** exponent).astype(g.dtype)
    unscaled, check = evaluate(
        lambda: op(tf.constant(scaled), Reciprocal.of(2.0 ** exponent).factors))
    got = unscaled.astype(np.float64)
    np.testing.assert_array_equal(got, scaled.astype(np.float64) / 2.0 ** exponent)
    np.testing.assert_array_equal(got, g.astype(np.float64))
    assert np.count_nonzero(got) == np.count_nonzero(g) > 0
    assert check == 0.0


def test_a_failed_compilation_is_remembered_and_not_tried_again(
        monkeypatch, tmp_path, fresh_kernel_state):
    calls = tmp_path / "calls"
    fake = tmp_path / "cxx"
    fake.write_text("#!/bin/sh\necho run >> %s\necho 'fatal: no headers here' >&2\nexit 1\n"
                    % calls)
    fake.chmod(0o755)
    monkeypatch.setenv(_kernels.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setenv(_kernels.ENV_MODE, "auto")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):      # two processes: the module's state is fresh for the second
            _kernels._reset_for_tests()  # pylint: disable=protected-access
            assert _kernels.load_unscale_check() is None
    assert calls.read_text().split() == ["run"]                # compiled once
    reasons = [str(w.message) for w in caught]
    assert len(reasons) == 2 and all("fatal: no headers here" in r for r in reasons)
    assert "an earlier build failed" in reasons[1] and ".failed" in reasons[1]


class _FakeTF:
    """Just what kernel_build reads of TensorFlow: its version and sysconfig flags."""

    def __init__(self, version, flags):
        self.version = type("version", (), {"VERSION": version})
        self.sysconfig = type("sysconfig", (), {"get_compile_flags": staticmethod(lambda: flags),
                                                "get_link_flags": staticmethod(lambda: [])})


@pytest.mark.parametrize("version, expected_std", [
    ("1.15.5", ["-std=c++14"]), ("2.6.5", ["-std=c++14"]), ("2.9.3", ["-std=c++14"]),
    ("2.10.0", []), ("2.15.1", []), ("2.21.0", [])])
def test_kernels_are_compiled_with_the_cxx_standard_tensorflow_was_built_with(
        version, expected_std):
    # TensorFlow up to 2.9 is C++14 (1.15: C++11, the same ABI): under C++17 absl::string_view becomes std::string_view and
    # the kernel's registration refers to symbols the framework library does not export.
    from npu_loss_scale._internal.compat import kernel_build
    base = ["-I/include", "-D_GLIBCXX_USE_CXX11_ABI=0"]
    assert kernel_build.compile_flags(_FakeTF(version, base)) == base + expected_std
    # a standard TensorFlow names itself is kept as it is
    assert kernel_build.compile_flags(_FakeTF(version, base + ["-std=c++17"])) == \
        base + ["-std=c++17"]
    with pytest.raises(ValueError, match="'nightly'"):
        kernel_build.compile_flags(_FakeTF("nightly", base))
