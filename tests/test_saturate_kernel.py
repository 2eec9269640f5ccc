"""The saturation kernels (npu_loss_scale/_internal/kernels/saturate.cc): ``NlsSaturate``, the
fused roundings ``NlsRoundHalfSaturate`` and ``NlsRoundHalf`` (INF/NaN mode) of the precision
emulation, and ``NlsMagnitude``, the magnitude overflow localisation notes.

Expected values come from NumPy, which shares nothing with the kernels: float32 to float16 is
NumPy's conversion (round to nearest, ties to even, subnormals kept), an inf becomes the dtype's
largest finite value of its sign and a NaN +0 (in INF/NaN mode both stay, a NaN as TensorFlow's
Cast writes it: its sign and the quiet NaN 0x7e00); the flags are ``isinf(...).any()`` and
``isnan(...).any()``; a magnitude is ``nanmax(abs(...))``. Then the emulation with the kernels is held to the emulation without them
(every rounding a Cast, TensorFlow ops for the saturation, a Cast back): the same bits in the
values and gradients, the same register words."""
import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale._internal import kernels as _kernels
from npu_loss_scale.device import precision
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import saturation
from tf_versions import evaluate, tf2_only

F16_MAX = np.float16(65504)


@pytest.fixture
def fused(monkeypatch):
    monkeypatch.setenv(_kernels.ENV_MODE, "on")
    module = _kernels.load_unscale_check()
    assert module is not None
    return module


def float32_patterns(seed, per_exponent):
    """float32 values over every exponent of both signs (random fractions and the fractions at
    float16's rounding boundaries: 13 low bits of the fraction are dropped), and the specials."""
    rng = np.random.RandomState(seed)
    edges = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FE000,
                      0x7FEFFF, 0x7FF000, 0x7FF001, 0x7FFFFF], np.uint32)
    fractions = np.concatenate([rng.randint(0, 1 << 23, per_exponent).astype(np.uint32), edges])
    exponents = np.arange(256, dtype=np.uint32)
    bits = (exponents[:, None] << 23) | fractions[None, :]
    bits = np.concatenate([bits.ravel(), bits.ravel() | np.uint32(0x80000000)])
    values = bits.view(np.float32)
    near_max = np.array([65504, 65505, 65519.996, 65520, 65536, 3e38, 5.96e-8, 2.98e-8,
                         2.9802322e-8, 2.9802326e-8, 6.1e-5, 6.097555e-5], np.float32)
    return np.concatenate([values, near_max, -near_max])


def numpy_saturated(low):
    """``low`` (any float dtype) with infs at the dtype's extremes and NaNs at +0."""
    big = np.finfo(low.dtype).max
    out = np.where(np.isnan(low), low.dtype.type(0), low)
    return np.where(np.isinf(out), np.sign(out) * big, out).astype(low.dtype)


def numpy_round_half(x):
    with np.errstate(over="ignore", invalid="ignore"):
        low = x.astype(np.float16)
    flags = [bool(np.isinf(low).any()), bool(np.isnan(low).any())]
    return numpy_saturated(low).astype(np.float32), flags


def numpy_round_half_ieee(x):
    """``x`` to float16 and back as INF/NaN mode rounds it: an overflow is inf, a NaN keeps its
    sign and loses its payload (0x7e00), as in TensorFlow's Cast."""
    with np.errstate(over="ignore", invalid="ignore"):
        low = x.astype(np.float16)
    flags = [bool(np.isinf(low).any()), bool(np.isnan(low).any())]
    bits = low.view(np.uint16)
    bits = np.where(np.isnan(low), (bits & 0x8000) | 0x7E00, bits).astype(np.uint16)
    return bits.view(np.float16).astype(np.float32), flags


def numpy_magnitude(x):
    """max |x| (0 when empty); inf when x holds an inf, else NaN when it holds a NaN."""
    a = np.abs(np.asarray(x, np.float64))
    if np.isinf(a).any():
        return np.inf
    if np.isnan(a).any():
        return np.nan
    return float(a.max()) if a.size else 0.0


def assert_same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    unsigned = "u%d" % got.dtype.itemsize
    differ = np.flatnonzero(got.view(unsigned) != want.view(unsigned))
    assert differ.size == 0, "%d elements differ, the first: %s got %s, want %s" % (
        differ.size, differ[:5], got.ravel()[differ[:5]], want.ravel()[differ[:5]])


def precision_config(mode="allow_mix_precision"):
    """A session config naming the NpuOptimizer's precision_mode, as Ascend scripts write it."""
    from npu_bridge.npu_init import npu_config_proto  # pylint: disable=import-outside-toplevel
    cfg = npu_config_proto()
    cfg.graph_options.rewrite_options.custom_optimizers[0].parameter_map[
        "precision_mode"].s = mode.encode()
    return cfg


def run_graph(graph, fetches, status, config=None):
    """``(values of fetches, register words after them, op types of the graph)`` of one run of
    ``graph`` in a new Session (variables initialised)."""
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        values = sess.run(fetches)
        words = sess.run(status)
    return values, words, {op.type for op in graph.get_operations()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fused_rounding_is_numpys_float16_saturated_over_every_exponent(fused, seed):
    x = float32_patterns(seed, per_exponent=600)       # about 314,000 values: sharded in parallel
    got, flags = evaluate(lambda: fused.nls_round_half_saturate(tf.constant(x)))
    want, want_flags = numpy_round_half(x)
    assert_same_bits(got, want)
    assert list(flags) == want_flags == [True, True]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_inf_nan_rounding_is_numpys_float16_over_every_exponent(fused, seed):
    x = float32_patterns(seed, per_exponent=600)       # NaNs with every payload among them
    got, flags = evaluate(lambda: fused.nls_round_half(tf.constant(x)))
    want, want_flags = numpy_round_half_ieee(x)
    assert_same_bits(got, want)
    assert list(flags) == want_flags == [True, True]


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
@pytest.mark.parametrize("size", [0, 1, 9, 32768, 100_003])
def test_the_magnitude_is_numpys_nanmax_of_abs_and_reads_nothing_when_not_wanted(
        fused, dtype, size):
    rng = np.random.RandomState(size)
    numpy_dtype = np.float32 if dtype == tf.bfloat16 else dtype.as_numpy_dtype
    base = (rng.randn(size) * 300).astype(numpy_dtype)
    cases = [base]
    for pos in sorted({0, size // 2, size - 1}) if size else []:
        for value in (np.nan, -np.inf):
            x = base.copy()
            x[pos] = value
            cases.append(x)
    if size > 2:
        both = base.copy()
        both[0], both[-1] = np.nan, np.inf
        cases.append(both)
    for x in cases:
        def value(x=x):
            return tf.cast(tf.constant(x), dtype)
        exact = evaluate(lambda: tf.cast(value(), tf.float64))  # pylint: disable=cell-var-from-loop
        got = evaluate(lambda: fused.nls_magnitude(value(), True))  # pylint: disable=cell-var-from-loop
        want = numpy_magnitude(exact)
        assert (np.isnan(got) and np.isnan(want)) or got == want, (got, want)
        assert evaluate(lambda: fused.nls_magnitude(value(), False)) == 0.0  # pylint: disable=cell-var-from-loop


@pytest.mark.parametrize("size", [1, 5, 32767, 32768, 100_003])
def test_the_flags_find_one_inf_or_nan_wherever_it_is(fused, size):
    rng = np.random.RandomState(size)
    base = (rng.rand(size).astype(np.float32) - 0.5) * 60000
    positions = sorted({0, size // 2, size // 3, size - 1})
    for pos in positions:
        for value, want in ((1e6, [True, False]), (-np.inf, [True, False]),
                            (np.nan, [False, True])):
            x = base.copy()
            x[pos] = value
            got, flags = evaluate(lambda: fused.nls_round_half_saturate(tf.constant(x)))  # pylint: disable=cell-var-from-loop
            assert list(flags) == want, (pos, value)
            assert got[pos] == (0.0 if np.isnan(value) else np.sign(value) * 65504.0)
    _, flags = evaluate(lambda: fused.nls_round_half_saturate(tf.constant(base)))
    assert list(flags) == [False, False]


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_nls_saturate_keeps_finite_values_and_maps_infs_and_nans_in_every_dtype(fused, dtype):
    rng = np.random.RandomState(3)
    numpy_dtype = np.float32 if dtype == tf.bfloat16 else dtype.as_numpy_dtype
    finite = (rng.randn(50_000) * 1000).astype(numpy_dtype)
    specials = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0], numpy_dtype)
    x = np.concatenate([finite, specials])
    got, flags = evaluate(lambda: fused.nls_saturate(tf.cast(tf.constant(x), dtype)))
    if dtype == tf.bfloat16:
        # bfloat16 to float32 is exact: the expected values are the bfloat16 ones, widened
        low = evaluate(lambda: tf.cast(tf.cast(tf.constant(x), tf.bfloat16), tf.float32))
        got = got.astype(np.float32)
        big = np.float32(tf.bfloat16.max)
        want = np.where(np.isnan(low), np.float32(0), low)
        want = np.where(np.isinf(want), np.sign(want) * big, want).astype(np.float32)
    else:
        want = numpy_saturated(x)
    assert_same_bits(got, want)
    assert list(flags) == [True, True]
    assert np.signbit(got[-2]) and not np.signbit(got[-1])   # -0 kept, +0 kept, NaN +0
    assert not np.signbit(got[-3])


@pytest.mark.parametrize("mode,op_type", [(emulation.SATURATION, "NlsRoundHalfSaturate"),
                                          (emulation.INF_NAN, "NlsRoundHalf")])
def test_the_emulation_rounds_through_the_kernel_and_without_it_to_the_same_bits(
        npu_shim, fused, monkeypatch, mode, op_type):  # pylint: disable=unused-argument
    """A TF1 graph rewritten at session creation (allow_mix_precision): a matmul whose float16
    result overflows, one whose operands lose bits, their gradients; with the kernels and with
    them off (a Cast, the saturation as TensorFlow ops, a Cast back), the values and the
    register agree, and only the first run has the fused op. In saturation mode the overflow
    saturates into the register; in INF/NaN mode (``NlsRoundHalf``) it stays inf and the
    register is left alone."""
    precision.install_session_hook()
    cfg = precision_config()
    rng = np.random.RandomState(5)
    x_value = (rng.randn(16, 24) * 40).astype(np.float32)
    w_value = (rng.randn(24, 8) * 200).astype(np.float32)

    def run():
        with tf.Graph().as_default() as graph:
            x = tf.constant(x_value)
            w = tf.compat.v1.get_variable("w", initializer=tf.constant(w_value))
            y = tf.matmul(x, w) * 1.0
            small = tf.matmul(x, w * 1e-3) * 1.0
            grads = tf.gradients(tf.reduce_sum(small * small) + tf.reduce_sum(y), [w])
            return run_graph(graph, [y, small] + grads, emulation.npu_get_float_status_v2(),
                             cfg)

    previous = emulation.set_device_sat_mode(mode)
    try:
        with_kernels, words, types = run()
        monkeypatch.setattr(_kernels, "load_unscale_check", lambda: None)
        without, words_without, types_without = run()
    finally:
        emulation.set_device_sat_mode(previous)
    other_mode_op = ({"NlsRoundHalfSaturate", "NlsRoundHalf"} - {op_type}).pop()
    assert op_type in types and other_mode_op not in types
    assert not types_without & {"NlsRoundHalfSaturate", "NlsRoundHalf", "NlsSaturate"}
    assert list(words) == list(words_without)
    if mode == emulation.SATURATION:
        assert words[0] == 1 and np.max(np.abs(with_kernels[0])) == 65504.0   # saturated
    else:
        assert not any(words) and np.isinf(with_kernels[0]).any()             # kept
    for got, want in zip(with_kernels, without):
        assert_same_bits(np.asarray(got), np.asarray(want))


def test_localised_roundings_through_the_kernel_are_the_same_sites_as_without_it(
        npu_shim, fused, monkeypatch):  # pylint: disable=unused-argument
    """With overflow localisation on, each rounding of the rewrite is a site named by the op
    whose float32 value it rounds, with that value's magnitude: the same sites (names,
    directions, magnitudes, order) with the kernels as without them."""
    from npu_loss_scale.device import localisation  # pylint: disable=import-outside-toplevel
    precision.install_session_hook()
    cfg = precision_config()

    def sites():
        localisation.enable()
        try:
            with tf.Graph().as_default() as graph:
                x = tf.constant([[300.0, 2.0], [1.0, 5.0]], name="x")
                w = tf.compat.v1.get_variable("w", initializer=tf.constant([[300.0], [1.0]]))
                y = tf.matmul(x, w, name="product") * 1.0
                loss = tf.reduce_sum(y)
                step = tf.compat.v1.train.GradientDescentOptimizer(0.0).minimize(loss)
                with tf.control_dependencies([step]):
                    status = emulation.npu_get_float_status_v2()
                with tf.compat.v1.Session(graph=graph, config=cfg) as sess:
                    sess.run(tf.compat.v1.global_variables_initializer())
                    words = sess.run(status)
                types = {op.type for op in graph.get_operations()}
            record = localisation.last_record()
            return words, types, [(s.op_name, s.direction, s.magnitude) for s in record.sites]
        finally:
            localisation.disable()

    words, types, with_kernels = sites()
    assert "NlsRoundHalfSaturate" in types
    monkeypatch.setattr(_kernels, "load_unscale_check", lambda: None)
    words_without, types_without, without = sites()
    assert "NlsRoundHalfSaturate" not in types_without
    assert words[0] == 1 and list(words) == list(words_without)
    assert with_kernels == without
    assert ("product", "forward", 90002.0) in with_kernels      # 300 * 300 + 2 * 1: over


def every_op_rounding_sites(mode):
    """``(gradient, register words, [(site, direction, op type)])`` of a step under
    saturate_every_op and overflow localisation in device mode ``mode``: a rounding whose
    gradient, 100,000, overflows float16 on its way back."""
    from npu_loss_scale.device import localisation  # pylint: disable=import-outside-toplevel
    previous = emulation.set_device_sat_mode(mode)
    localisation.enable()
    try:
        with tf.Graph().as_default() as graph:
            with saturation.saturate_every_op():
                w = tf.compat.v1.get_variable("w", initializer=tf.constant([300.0]))
                y = emulation.round_to_float16(w * 1.0)
                loss = tf.reduce_sum(y * 1000.0)             # dloss/dy = 1000, in range
                grad = tf.gradients(loss * 100.0, [w])[0]      # 100,000: over on its way back
            with tf.control_dependencies([grad]):
                status = emulation.npu_get_float_status_v2()
            with tf.compat.v1.Session(graph=graph) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                got, words = sess.run([grad, status])
        record = localisation.last_record()
    finally:
        localisation.disable()
        emulation.set_device_sat_mode(previous)
    return got, words, [(s.op_name, s.direction, graph.get_operation_by_name(s.op_name).type)
                        for s in record.sites]


def test_under_every_op_a_localised_rounding_and_its_gradient_are_sites_of_their_own(
        fused):  # pylint: disable=unused-argument
    """Under saturate_every_op a rounding's float16 cast would be an op that saturates, and so
    would the cast of the gradient flowing back: the fused rounding and its gradient's rounding
    are the sites, by their own names, so that the doctor can replay them; in INF/NaN mode the
    same sites, by the same names (one per rounding), the values left at inf."""
    got, words, sites = every_op_rounding_sites(emulation.SATURATION)
    assert words[0] == 1 and got[0] == 65504.0
    assert len(sites) == 1
    name, direction, op_type = sites[0]
    assert direction == "backward" and op_type == "NlsRoundHalfSaturate"
    assert name.startswith("gradients/")
    got, words, ieee_sites = every_op_rounding_sites(emulation.INF_NAN)
    assert not any(words) and got[0] == np.inf
    assert ieee_sites == [(name, direction, "NlsRoundHalf")]


def test_every_op_saturation_through_the_kernel_and_without_it_gives_the_same_bits(
        fused, monkeypatch):  # pylint: disable=unused-argument
    x_value = np.array([[300.0, 2.0, -250.0], [1e-3, 70.0, 300.0]], np.float16)

    def run():
        with tf.Graph().as_default() as graph:
            with saturation.saturate_every_op():
                x = tf.constant(x_value)
                w = tf.compat.v1.get_variable("w", initializer=tf.constant(x_value.T))
                y = tf.matmul(x, w)
                z = tf.exp(y / 1000.0) + y * y
                grads = tf.gradients(tf.reduce_sum(tf.cast(z, tf.float32)), [w])
            return run_graph(graph, [y, z] + grads, emulation.npu_get_float_status_v2())

    with_kernels, words, types = run()
    assert "NlsSaturate" in types
    monkeypatch.setattr(_kernels, "load_unscale_check", lambda: None)
    without, words_without, _ = run()
    assert words[0] == 1 and list(words) == list(words_without)
    for got, want in zip(with_kernels, without):
        assert_same_bits(np.asarray(got), np.asarray(want))


@tf2_only
def test_a_traced_step_rounds_its_gradients_through_the_kernel_to_the_same_bits(
        fused, monkeypatch):  # pylint: disable=unused-argument
    """TF2 code rounds as it is traced, before its gradients: the gradient flowing back through
    a fused rounding is rounded and saturated as through a Cast, saturate() and a Cast."""
    rng = np.random.RandomState(7)
    x = tf.constant((rng.randn(8, 12) * 30).astype(np.float32))
    w_value = (rng.randn(12, 4) * 30).astype(np.float32)

    def run():
        emulation.reset_register()
        w = tf.Variable(w_value)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                y = tf.matmul(x, w)
                loss = tf.reduce_sum(y * y * 1e3)   # a backward value beyond float16's range
            return y, loss, tape.gradient(loss, w), emulation.npu_get_float_status_v2()

        with precision.op_precision("allow_mix_precision"):
            values = [v.numpy() for v in step()]
            types = {op.type for op in step.get_concrete_function().graph.get_operations()}
        return values, types

    with_kernels, types = run()
    assert "NlsRoundHalfSaturate" in types
    monkeypatch.setattr(_kernels, "load_unscale_check", lambda: None)
    without, types_without = run()
    assert "NlsRoundHalfSaturate" not in types_without
    assert with_kernels[-1][0] == 1
    assert np.max(np.abs(with_kernels[2])) == 65504.0     # the gradient saturated on its way back
    for got, want in zip(with_kernels, without):
        assert_same_bits(np.asarray(got), np.asarray(want))


def _held_back_by_records(graph):
    """The ops of ``graph`` that wait for a register record through a control input, but the
    register's own ops (its later records and reads) and the function's end (a NoOp)."""
    return sorted(op.name for op in graph.get_operations()
                  if any(c.type == "LookupTableInsertV2" for c in op.control_inputs)
                  and not op.type.startswith("LookupTable") and op.type != "NoOp")


@tf2_only
def test_a_traced_rounding_does_not_wait_for_the_register_records_built_before_it(fused):  # pylint: disable=unused-argument
    """In a tf.function TensorFlow chains the register's records (one resource) and orders the
    register's read after them: a rounded value held back until its record ran would wait for
    every record before it, and the step's ops would run one after the other. The read still
    sees every overflow, the unused rounding's included (a record runs whether read or not)."""
    emulation.reset_register()
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])

    @tf.function
    def step(scale):
        y = tf.matmul(x * scale, x)          # rounded operands and result
        emulation.round_to_float16(x * 1e6)  # overflows; its value is never used
        return y, tf.reduce_sum(y), emulation.npu_get_float_status_v2()

    with precision.op_precision("allow_mix_precision"):
        y, _, words = [v.numpy() for v in step(tf.constant(1.0))]
        graph = step.get_concrete_function(tf.TensorSpec([], tf.float32)).graph
    assert words[0] == 1
    assert y.tolist() == [[7.0, 10.0], [15.0, 22.0]]
    types = [op.type for op in graph.get_operations()]
    assert types.count("NlsRoundHalfSaturate") == 4 and types.count("LookupTableInsertV2") == 4
    assert _held_back_by_records(graph) == []


def test_in_a_tf1_graph_a_rounded_value_waits_for_its_record(fused):  # pylint: disable=unused-argument
    """A tf.compat.v1 graph orders no stateful op by itself: there a read ordered after the
    rounded value must find its record done, so the value is an identity under the record."""
    with tf.Graph().as_default() as graph:
        y = emulation.round_to_float16(tf.constant([7e4, 1.0]))
        with tf.control_dependencies([y]):
            status = emulation.npu_get_float_status_v2()
        held = _held_back_by_records(graph)
        with tf.compat.v1.Session() as sess:
            got, words = sess.run([y, status])
    assert held == [y.op.name] and got.tolist() == [65504.0, 1.0] and words[0] == 1
