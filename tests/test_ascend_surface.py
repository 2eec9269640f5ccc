"""The npu_bridge surface of the emulate shim: each name does on CPU what the device does, or
raises an error naming it as not emulated; precision_mode and iterations_per_loop as on the device."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context

from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation
from rank_lines import json_events
from tf_versions import TF1, estimator_only, npu_device_only, tf1_names_on_tf2_only
from npu_loss_scale._internal.compat import keras as compat_keras
from npu_loss_scale.device import precision

HERE = os.path.dirname(os.path.abspath(__file__))
SESSION_SCRIPT = os.path.join(HERE, "scripts", "ascend_session_mix_precision.py")
# The module a script's ``tf`` is, as the script prints it: on TF 2 the emulation hands
# ``import tensorflow.compat.v1 as tf`` (and, with --tf1, ``import tensorflow as tf``) the name
# ``tensorflow.compat.v1``; on TF 1.15 nothing is mapped and each import gets 1.15's own module.
SCRIPT_TF_V1 = "tensorflow._api.v1.compat.v1" if TF1 else "tensorflow.compat.v1"
KERAS_SCRIPT_TF = "tensorflow" if TF1 else "tensorflow.compat.v1"
ESTIMATOR_SCRIPT = os.path.join(HERE, "scripts", "ascend_estimator_run_config.py")


@pytest.fixture
def shim(npu_shim):  # pylint: disable=unused-argument,redefined-outer-name
    yield


def _star(module, preset=None):
    names = dict(preset or {})
    exec("from %s import *" % module, names)  # pylint: disable=exec-used
    return names


# -- shim defects of the issue ---------------------------------------------------------------------
def test_star_import_keeps_the_scripts_own_tf_and_gives_tensorflow_otherwise(shim):
    v1 = tf.compat.v1
    assert _star("npu_bridge.npu_init", {"tf": v1})["tf"] is v1
    assert _star("npu_bridge.npu_init")["tf"] is tf
    assert "tf" not in _star("npu_bridge.estimator.npu.npu_config", {"tf": v1}) or \
        _star("npu_bridge.estimator.npu.npu_config", {"tf": v1})["tf"] is v1


def test_loss_scale_optimizer_module_re_exports_the_managers(shim):
    from npu_bridge.estimator.npu import (  # pylint: disable=import-outside-toplevel
        npu_loss_scale_optimizer as module)
    import npu_loss_scale as nls  # pylint: disable=import-outside-toplevel
    assert module.FixedLossScaleManager is nls.FixedLossScaleManager
    assert module.ExponentialUpdateLossScaleManager is nls.ExponentialUpdateLossScaleManager


def test_one_rank_is_distributed_true_trains_as_the_device_does(shim, graph, session):
    from npu_bridge.npu_init import (FixedLossScaleManager,  # pylint: disable=import-outside-toplevel
                                     NPUDistributedOptimizer, NPULossScaleOptimizer)
    w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
    loss = tf.reduce_sum(w * w)
    opt = NPULossScaleOptimizer(
        NPUDistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.25)),
        FixedLossScaleManager(1024), is_distributed=True)
    assert opt.requested_distributed is True and opt.is_distributed is False
    train = opt.minimize(loss)
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(train)
    np.testing.assert_allclose(session.run(w), [0.5, 1.0])


# -- names that are not emulated ---------------------------------------------------------------------
def test_missing_names_raise_an_error_that_names_them(shim):
    from npu_bridge.estimator import npu_ops  # pylint: disable=import-outside-toplevel
    with pytest.raises(ImportError, match=r"npu_bridge\.estimator\.npu_ops\.lars_v2 is not "
                                          r"emulated.*provides: dropout"):
        npu_ops.lars_v2  # pylint: disable=pointless-statement
    with pytest.raises(ImportError, match=r"npu_ops\.fused_thing is not emulated"):
        exec("from npu_bridge.estimator.npu_ops import fused_thing", {})  # pylint: disable=exec-used
    with pytest.raises(ModuleNotFoundError, match=r"npu_bridge\.estimator\.npu\.npu_strategy "
                                                  r"is not emulated"):
        exec("from npu_bridge.estimator.npu.npu_strategy import NPUStrategy", {})  # pylint: disable=exec-used
    assert not hasattr(npu_ops, "__wrapped__")  # dunder look-ups stay plain AttributeErrors


# -- ops -----------------------------------------------------------------------------------------------
def test_npu_dropout_keeps_or_zeroes_and_scales_by_one_over_keep_prob(shim, graph, session):
    from npu_bridge.estimator import npu_ops  # pylint: disable=import-outside-toplevel
    x = tf.ones([1000])
    assert npu_ops.dropout(x, 1.0) is not None
    kept = session.run(npu_ops.dropout(x, 0.25, seed=3))
    assert set(np.unique(kept)) <= {0.0, 4.0}
    assert 150 < np.count_nonzero(kept) < 350
    np.testing.assert_array_equal(session.run(npu_ops.dropout(x, 1.0)), np.ones(1000))
    with pytest.raises(ValueError, match="keep_prob must be a float in \\(0, 1\\]"):
        npu_ops.dropout(x, 0.0)
    with pytest.raises(ValueError, match="floating-point"):
        npu_ops.dropout(tf.constant([1, 2]), 0.5)


def test_npu_dropout_is_graph_only_as_on_the_device(shim):
    from npu_bridge.estimator import npu_ops  # pylint: disable=import-outside-toplevel
    with context.eager_mode():  # TF 2's default; on TF 1.15 eager is asked for here
        with pytest.raises(RuntimeError, match="not available in eager"):
            npu_ops.dropout(tf.ones([2]), 0.5)


def test_npu_gelu_is_the_devices_tanh_form(shim, graph, session):
    from npu_bridge.estimator.npu_unary_ops import (  # pylint: disable=import-outside-toplevel
        npu_unary_ops)
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 3.0], np.float32)
    want = x / (1.0 + np.exp(-np.sqrt(8.0 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(session.run(npu_unary_ops.gelu(tf.constant(x))), want, rtol=1e-4,
                               atol=1e-6)


def test_hccl_collectives_are_the_identity_at_one_rank_and_refuse_several(shim, graph, session,
                                                                          monkeypatch):
    from npu_bridge.hccl import hccl_ops  # pylint: disable=import-outside-toplevel
    t = tf.constant([1.0, 2.0])
    assert session.run(hccl_ops.broadcast([t], 0))[0].tolist() == [1.0, 2.0]
    assert session.run(hccl_ops.allreduce(t, "sum")).tolist() == [1.0, 2.0]
    assert session.run(hccl_ops.allgather(t, 1)).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="root_rank must be an int in \\[0, RANK_SIZE=1\\)"):
        hccl_ops.broadcast([t], 1)
    with pytest.raises(ValueError, match="reduction must be one of"):
        hccl_ops.allreduce(t, "mean")
    monkeypatch.setenv("RANK_SIZE", "2")
    with pytest.raises(NotImplementedError, match="RANK_SIZE=2"):
        hccl_ops.allreduce(t, "sum")


def test_set_iteration_per_loop_runs_the_train_op_n_times_per_session_run(shim, graph, session):
    from npu_bridge.estimator.npu import util  # pylint: disable=import-outside-toplevel
    counter = tf.compat.v1.get_variable("counter", initializer=0, use_resource=True)
    step = counter.assign_add(1).op
    session.run(tf.compat.v1.global_variables_initializer())
    assert util.set_iteration_per_loop(session, step, 1) is step
    loop = util.set_iteration_per_loop(session, step, 3)
    session.run(loop)
    session.run(loop)
    assert session.run(counter) == 6
    session.run(step)               # the train op itself is still one step
    assert session.run(counter) == 7
    with pytest.raises(ValueError, match="iterations_per_loop must be positive; got 0"):
        util.set_iteration_per_loop(session, step, 0)


def test_session_helpers_and_resources(shim, graph):
    from npu_bridge import npu_init  # pylint: disable=import-outside-toplevel
    config = npu_init.npu_config_proto()
    names = [c.name for c in config.graph_options.rewrite_options.custom_optimizers]
    assert names == ["NpuOptimizer"] and config.allow_soft_placement
    assert len(npu_init.npu_config_proto(config).graph_options.rewrite_options
               .custom_optimizers) == 1
    sess, shutdown = npu_init.init_resource()
    assert npu_init.get_npu_rank_size() == 1 and npu_init.get_npu_rank_id() == 0
    npu_init.shutdown_resource(sess, shutdown)
    npu_init.close_session(sess)
    hooks = npu_init.npu_hooks_append([])
    assert [type(h).__name__ for h in hooks] == ["NPUBroadcastGlobalVariablesHook"]
    with npu_init.npu_scope.without_npu_compile_scope():
        op = tf.constant(1.0).op
    assert op.get_attr("_without_npu_compile") is True


# -- precision_mode ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, want, overflowed", [
    ("allow_mix_precision", 65504.0, True),     # 300*300 + 1 in float16: saturated
    ("allow_fp32_to_fp16", 65504.0, True),
    ("cube_fp16in_fp32out", 90001.0, False),    # float16 operands, float32 result
    ("force_fp32", 90001.0, False),
    ("must_keep_origin_dtype", 90001.0, False),
])
def test_precision_mode_from_the_session_config_computes_matmul_as_the_device(
        shim, graph, mode, want, overflowed):
    from npu_bridge.npu_init import npu_config_proto  # pylint: disable=import-outside-toplevel
    y = tf.matmul(tf.constant([[300.0, 1.0]]), tf.constant([[300.0], [1.0]]))
    doubled = y * 1.0
    status = emulation.npu_get_float_status_v2()
    config = npu_config_proto()
    config.graph_options.rewrite_options.custom_optimizers[0] \
        .parameter_map["precision_mode"].s = mode.encode()
    with tf.compat.v1.Session(config=config) as sess:
        assert sess.run(doubled)[0, 0] == want
        assert bool(sess.run(status).any()) is overflowed


def test_precision_mode_rounds_operands_to_float16(shim, graph):
    y = tf.matmul(tf.constant([[1.0001]]), tf.constant([[1.0]])) + 0.0
    assert precision.apply_precision_mode(graph, "allow_mix_precision") == 1
    assert precision.apply_precision_mode(graph, "allow_mix_precision") == 0  # idempotent
    with tf.compat.v1.Session() as sess:
        assert sess.run(y)[0, 0] == 1.0


def test_precision_mode_values_are_checked(shim, graph):
    with pytest.raises(ValueError, match="precision_mode must be one of 'allow_fp32_to_fp16'.*"
                                         "got 'fp8'"):
        precision.check_precision_mode("fp8")


# -- NPURunConfig / NPUEstimator -----------------------------------------------------------------------
@estimator_only
def test_npu_run_config_accepts_validates_and_records_device_options(shim):
    from npu_bridge.npu_init import (  # pylint: disable=import-outside-toplevel
        DumpConfig, NPURunConfig)
    config = NPURunConfig(iterations_per_loop=10, precision_mode="allow_mix_precision",
                          dump_config=DumpConfig(enable_dump=True, dump_mode="all"),
                          hcom_parallel=True, op_debug_level=0, model_dir=None)
    assert config.npu_options["hcom_parallel"] is True
    assert config.iterations_per_loop == 10 and config.save_checkpoints_steps == 100
    custom = config.session_config.graph_options.rewrite_options.custom_optimizers[0]
    assert custom.name == "NpuOptimizer"
    assert custom.parameter_map["precision_mode"].s == b"allow_mix_precision"
    with pytest.raises(ValueError, match="iterations_per_loop must be an int >= 1; got 0"):
        NPURunConfig(iterations_per_loop=0)
    with pytest.raises(ValueError, match="precision_mode must be one of.*got 'half'"):
        NPURunConfig(precision_mode="half")
    with pytest.raises(TypeError, match="unknown option\\(s\\) iteration_per_loop"):
        NPURunConfig(iteration_per_loop=2)
    with pytest.raises(TypeError, match="dump_config must be a DumpConfig"):
        NPURunConfig(dump_config={"enable_dump": True})
    with pytest.raises(ValueError, match="iterations_per_loop must be 1 when mix_compile_mode"):
        NPURunConfig(mix_compile_mode=True, iterations_per_loop=2)


def test_npu_run_config_without_the_estimator_says_what_is_missing(shim, monkeypatch):
    """On TF 2.21 (no Estimator) NPURunConfig/NPUEstimator import but refuse to be built."""
    from npu_bridge import _estimator  # pylint: disable=import-outside-toplevel
    from npu_bridge.estimator.npu import (  # pylint: disable=import-outside-toplevel
        npu_config, npu_estimator)
    if _estimator.available():  # TF 2.15: build the classes a TF without the Estimator gets
        def missing():
            raise ImportError(_estimator.MISSING % "no module named tensorflow_estimator")
        monkeypatch.setattr(_estimator, "estimator_lib", missing)
        classes = [npu_config._NPURunConfigWithoutEstimator,  # pylint: disable=protected-access
                   type("NPUEstimator", (npu_estimator._WithoutEstimator,), {})]  # pylint: disable=protected-access
    else:
        classes = [npu_config.NPURunConfig, npu_estimator.NPUEstimator]
    for cls in classes:
        with pytest.raises(ImportError, match="Estimator, which this TensorFlow does not have"):
            cls(iterations_per_loop=1)


# -- unmodified Ascend-shaped scripts, in a fresh interpreter ---------------------------------------
def _run(args, cwd):
    env = dict(os.environ)
    env.pop(detection.ENV_VAR, None)
    env.pop(emulation.MODE_ENV_VAR, None)
    env.pop("RANK_SIZE", None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate"] + args, env=env,
                            cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json_events(result.stdout)


def test_session_script_with_mix_precision_in_its_config_exercises_the_loss_scaler(tmp_path):
    """Float32 model, precision_mode from parameter_map: scales 2**17 and 2**16 overflow the
    float16 gradient matmul, so two steps are skipped (decr_every_n_nan_or_inf=1, ratio 0.5)."""
    events = _run([SESSION_SCRIPT, "--steps=4"], str(tmp_path))
    assert events[0] == {"event": "start", "tf_module": SCRIPT_TF_V1}
    steps = [(e["scale_before"], e["global_step"]) for e in events if e["event"] == "step"]
    assert steps == [(131072.0, 0), (65536.0, 0), (32768.0, 1), (32768.0, 2)]
    assert events[-1]["kernel"] == pytest.approx([1.0 - 2 * 0.001] * 2, abs=1e-6)


def test_session_script_in_force_fp32_never_overflows_and_loops_per_run(tmp_path):
    events = _run([SESSION_SCRIPT, "--precision_mode=force_fp32", "--steps=2",
                   "--iterations_per_loop=3"], str(tmp_path))
    steps = [(e["scale_before"], e["global_step"]) for e in events if e["event"] == "step"]
    assert steps == [(131072.0, 3), (131072.0, 6)]


def test_plain_ignores_the_precision_mode_of_the_session_config(tmp_path):
    """--plain: the same script as above, its allow_mix_precision not applied: float32 as
    written, no overflow at 2**17."""
    events = _run(["--plain", SESSION_SCRIPT, "--steps=2"], str(tmp_path))
    steps = [(e["scale_before"], e["global_step"]) for e in events if e["event"] == "step"]
    assert steps == [(131072.0, 1), (131072.0, 2)]


@estimator_only
def test_estimator_script_honours_iterations_per_loop_and_precision_mode(tmp_path):
    """iterations_per_loop=2, max_steps=4: the first run's two steps overflow (2**17, 2**16 in
    float16) and are skipped, the next two runs apply two steps each."""
    events = _run([ESTIMATOR_SCRIPT, "--model_dir=%s" % (tmp_path / "model")], str(tmp_path))
    assert events[0] == {"event": "start", "tf_module": "tensorflow"}
    runs = [(e["scale_after"], e["global_step"]) for e in events if e["event"] == "run"]
    assert runs == [(32768.0, 0), (32768.0, 2), (32768.0, 4)]
    assert events[-1]["kernel"] == pytest.approx([1.0 - 4 * 0.001] * 2, abs=1e-6)


# -- TF1 mode ----------------------------------------------------------------------------------------
TF1_SCRIPT = os.path.join(HERE, "scripts", "tf1_session", "train.py")


TF2_SCRIPT = os.path.join(HERE, "scripts", "ascend_tf2_npu_device.py")


@npu_device_only
def test_tf2_npu_device_script_trains_through_npu_device_loss_scale_optimizer(tmp_path):
    """npu_device.open(), global_options() and train.optimizer.NpuLossScaleOptimizer resolve to
    the package: the saturating batch is skipped (weights kept, scale 16 -> 8), the others apply."""
    events = _run(["--saturate-every-op", TF2_SCRIPT], str(tmp_path))
    assert [(e["scale_before"], e["finite"], e["weights_moved"]) for e in events] == [
        (16.0, True, True), (16.0, False, False), (8.0, True, True)]


@tf1_names_on_tf2_only
def test_tf1_mode_gives_the_users_files_tf1_and_the_package_tf2(tmp_path):
    events = _run(["--tf1", TF1_SCRIPT, "--steps=2"], str(tmp_path))
    v1 = tf.compat.v1.__name__  # tensorflow.compat.v1 (2.15) or tensorflow._api.v2.compat.v1
    assert events == [{"script_tf": v1, "model_tf": v1, "package_tf": "tensorflow",
                       "eager": False, "kernel": [0.0, 0.0]}]


@tf1_names_on_tf2_only
def test_tf1_mode_provides_tf1_mnist_and_names_tensorflow_contrib_imports_as_not_mapped(
        tmp_path):
    script = tmp_path / "uses_contrib.py"
    script.write_text("import tensorflow as tf\n"
                      "from tensorflow.examples.tutorials.mnist import input_data\n"
                      "print(input_data.read_data_sets.__module__)\n"
                      "import tensorflow.contrib.quantize as quantize\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--tf1",
                             str(script)], env=env, cwd=str(tmp_path), capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.stdout.strip() == "npu_loss_scale.ascend.tf1_mnist"
    assert result.returncode != 0
    assert "tensorflow.contrib.quantize: tensorflow.contrib was removed in TensorFlow 2 and the " \
        "TF1 mode of npu_loss_scale.emulate does not map this module" in result.stderr


def test_dynamic_rnn_is_the_devices_lstm(shim, graph, session):
    from npu_bridge.estimator.npu.npu_dynamic_rnn import (  # pylint: disable=import-outside-toplevel
        DynamicRNN)
    rng = np.random.RandomState(0)
    xs = rng.randn(3, 2, 4).astype(np.float32)       # [T, B, I]
    lstm = DynamicRNN(hidden_size=5, dtype=tf.float32, forget_bias=1.0)
    y, h, c, _, _, _, _, _ = lstm(tf.constant(xs), seq_length=tf.constant([3, 2]))
    grads = tf.gradients(tf.reduce_sum(y), [lstm._w])  # pylint: disable=protected-access
    session.run(tf.compat.v1.global_variables_initializer())
    w, b = session.run([lstm._w, lstm._b])  # pylint: disable=protected-access
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    hh, cc = np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32)
    want = []
    for t in range(3):
        gi, gj, gf, go = np.split(np.concatenate([xs[t], hh], 1) @ w + b, 4, axis=1)
        c_new = sig(gf + 1.0) * cc + sig(gi) * np.tanh(gj)
        h_new = sig(go) * np.tanh(c_new)
        alive = np.array([[t < 3], [t < 2]], np.float32)
        want.append(alive * h_new)
        hh, cc = alive * h_new + (1 - alive) * hh, alive * c_new + (1 - alive) * cc
    got_y, got_h, got_c = session.run([y, h, c])
    np.testing.assert_allclose(got_y, np.stack(want), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_h[-1], hh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_c[-1], cc, rtol=1e-5, atol=1e-6)
    assert np.abs(session.run(grads[0])).sum() > 0
    with pytest.raises(ValueError, match="DynamicRNN use_peephole must be False"):
        DynamicRNN(4, tf.float32, use_peephole=True)


# -- N emulated ranks ----------------------------------------------------------------------------------
TWO_RANK_SCRIPT = os.path.join(HERE, "scripts", "ascend_two_rank_hccl.py")


@pytest.mark.distributed
def test_two_emulated_ranks_run_hccl_over_collectives_and_agree_on_overflow(tmp_path):
    """Rank 1's gradient (2 * 2**15) overflows float16, rank 0's does not: both skip step 1.
    Averaged gradient (1 + 2) / 2 = 1.5, two applied steps of lr 0.125: kernel 1 - 0.375."""
    events = _run(["--ranks", "2", TWO_RANK_SCRIPT], str(tmp_path))
    by_rank = {r: [e for e in events if e["rank"] == r] for r in (0, 1)}
    for rank, mine in by_rank.items():
        assert mine[0] == {"event": "collectives", "rank": rank, "size": 2, "summed": 3.0,
                           "root": 10.0, "kernel0": 1.0}
        steps = [(e["scale_before"], e["global_step"]) for e in mine if e["event"] == "step"]
        assert steps == [(32768.0, 0), (16384.0, 1), (16384.0, 2)]
        assert mine[-1]["kernel"] == [0.625, 0.625]


def test_ranks_option_is_checked(tmp_path):
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--ranks", "0",
                             TWO_RANK_SCRIPT], capture_output=True, text=True, timeout=120,
                            check=False, cwd=str(tmp_path))
    assert result.returncode == 2 and "argument --ranks/-np: must be an int >= 1; got 0" in result.stderr


# -- npu_device (TF2 adapter) ------------------------------------------------------------------------
@npu_device_only
def test_npu_device_sets_the_emulated_devices_overflow_mode(shim):
    import npu_device  # pylint: disable=import-outside-toplevel
    assert npu_device.get_device_sat_mode() == 0          # conftest: saturation
    npu_device.set_device_sat_mode(1)
    assert emulation.is_inf_nan_enabled() and npu_device.get_device_sat_mode() == 1
    x = tf.constant([300.0], tf.float16)
    assert np.isinf(emulation.saturate(x * x).numpy()[0])  # INF/NaN: 90000 stays inf
    npu_device.set_device_sat_mode(0)
    assert emulation.saturate(x * x).numpy()[0] == 65504.0
    with pytest.raises(ValueError, match=r"mode must be 0 \(saturation\) or 1 \(INF/NaN\); got 2"):
        npu_device.set_device_sat_mode(2)


@npu_device_only
def test_npu_device_options_are_validated_recorded_and_open_applies_precision(shim):
    import npu_device  # pylint: disable=import-outside-toplevel
    options = npu_device.global_options()
    options.precision_mode = "allow_mix_precision"
    options.dump_config.enable_dump = True
    options.experimental.multi_branches_config.input_shape = "data:-1,3"
    assert options.recorded == {"precision_mode": "allow_mix_precision"}
    assert options.dump_config.recorded == {"enable_dump": True}
    with pytest.raises(AttributeError, match="has no option 'precison_mode'"):
        options.precison_mode = "force_fp16"
    with pytest.raises(ValueError, match="precision_mode must be one of"):
        options.precision_mode = "fp8"
    assert tf.executing_eagerly()  # TF2 code: open() applies the mode to the ops run from now on
    x, w = tf.constant([[300.0, 1.0]]), tf.constant([[300.0], [1.0]])
    assert tf.matmul(x, w).numpy()[0, 0] == 90001.0          # float32 before open()
    device = npu_device.open().as_default()
    assert npu_device.global_npu_ctx() is device
    assert tf.matmul(x, w).numpy()[0, 0] == 65504.0          # float16, saturated
    assert precision.op_precision_mode() == "allow_mix_precision"
    assert precision._default_mode[0] == "allow_mix_precision"  # pylint: disable=protected-access
    dataset = tf.data.Dataset.range(4)
    assert npu_device.distribute.shard_and_rebatch_dataset(dataset, 8) == (dataset, 8)
    assert npu_device.distribute.all_reduce([tf.constant(2.0)], "mean")[0].numpy() == 2.0
    from npu_device.train.optimizer import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    from npu_loss_scale.keras import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer as ours)
    # ours, plus the device's agreement on overflow across ranks (tests/test_npu_device_ranks.py)
    assert issubclass(NpuLossScaleOptimizer, ours)
    with pytest.raises(ImportError,
                       match=r"npu_device\.train\.optimizer\.NpuOptimizer is not emulated"):
        exec("from npu_device.train.optimizer import NpuOptimizer", {})  # pylint: disable=exec-used
    from npu_device.compat.v1.npu_init import (  # pylint: disable=import-outside-toplevel
        npu_config_proto)
    assert npu_config_proto().allow_soft_placement


@tf1_names_on_tf2_only
def test_tf1_contrib_pieces_map_to_tf2_equivalents(graph, session):
    from npu_loss_scale.ascend.tf1_contrib import contrib  # pylint: disable=import-outside-toplevel
    c = contrib()
    ds = tf.data.Dataset.range(10).apply(c.data.map_and_batch(lambda x: x * 2, 4,
                                                              drop_remainder=True))
    first = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
    inter = tf.data.Dataset.range(2).apply(c.data.parallel_interleave(
        lambda x: tf.data.Dataset.from_tensors(x).repeat(2), cycle_length=2))
    inter_all = tf.compat.v1.data.make_one_shot_iterator(inter.batch(4)).get_next()
    ln = c.layers.layer_norm(tf.constant([[1.0, 2.0, 3.0]]))
    reg = c.layers.l2_regularizer(0.5)(tf.constant([2.0]))
    w = tf.compat.v1.get_variable("w", [30, 40], initializer=c.layers.xavier_initializer())
    session.run(tf.compat.v1.global_variables_initializer())
    assert session.run(first).tolist() == [0, 2, 4, 6]
    assert sorted(session.run(inter_all).tolist()) == [0, 0, 1, 1]
    np.testing.assert_allclose(session.run(ln), [[-1.2247449, 0.0, 1.2247449]], rtol=1e-5)
    assert session.run(reg) == 1.0
    assert np.abs(session.run(w)).max() <= np.sqrt(6.0 / 70.0)
    assert [v.name for v in tf.compat.v1.global_variables()][:2] == ["LayerNorm/beta:0",
                                                                     "LayerNorm/gamma:0"]
    with pytest.raises(AttributeError, match="tf.contrib.quantize is not mapped"):
        c.quantize  # pylint: disable=pointless-statement
    with pytest.raises(AttributeError, match="tf.contrib.tpu.no_such_name is not mapped"):
        c.tpu.no_such_name  # pylint: disable=pointless-statement


def test_tf1_mnist_reads_the_files_a_script_points_it_at(tmp_path):
    import gzip  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.ascend import tf1_mnist  # pylint: disable=import-outside-toplevel
    rng = np.random.RandomState(0)

    def write(name, array, magic):
        with gzip.open(str(tmp_path / name), "wb") as handle:
            handle.write(magic.to_bytes(4, "big")
                         + b"".join(d.to_bytes(4, "big") for d in array.shape)
                         + array.astype(np.uint8).tobytes())

    for prefix, n in (("train", 30), ("t10k", 10)):
        write(prefix + "-images-idx3-ubyte.gz", rng.randint(0, 256, (n, 28, 28)), 2051)
        write(prefix + "-labels-idx1-ubyte.gz", np.arange(n) % 10, 2049)
    data = tf1_mnist.read_data_sets(str(tmp_path), one_hot=True, validation_size=5, seed=1)
    assert (data.train.num_examples, data.validation.num_examples, data.test.num_examples) == \
        (25, 5, 10)
    images, labels = data.train.next_batch(20)
    assert images.shape == (20, 784) and 0.0 <= images.min() and images.max() <= 1.0
    assert labels.shape == (20, 10) and (labels.sum(axis=1) == 1).all()
    images, _ = data.train.next_batch(20)            # crosses the epoch boundary
    assert images.shape == (20, 784) and data.train.epochs_completed == 1
    assert data.test.labels.argmax(axis=1).tolist() == list(range(10))
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte.gz"):
        (tmp_path / "t10k-images-idx3-ubyte.gz").unlink()
        tf1_mnist.read_data_sets(str(tmp_path))


# -- TF1 Keras: model.fit in the session set_keras_session_npu_config makes -------------------------
KERAS_SCRIPT = os.path.join(HERE, "scripts", "tf1_keras", "train.py")


def _keras_2():
    try:
        return hasattr(tf.compat.v1.keras.backend, "set_session")
    except ImportError:
        return False


def _run_keras_script(tmp_path, *args):
    report = tmp_path / "report.json"
    env = dict(os.environ)
    for name in (detection.ENV_VAR, emulation.MODE_ENV_VAR, "RANK_SIZE",
                 "NPU_LOSS_SCALE_EMULATE_REPORT"):
        env.pop(name, None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run(
        [sys.executable, "-m", "npu_loss_scale.emulate", "--report", str(report), "--tf1",
         KERAS_SCRIPT, "--init_loss_scale=65536", "--epochs=2", "--steps_per_epoch=6"]
        + list(args), env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
        check=False)
    return result, report


def test_tf1_keras_script_trains_in_the_npu_session_and_skips_float16_overflows(tmp_path):
    """allow_mix_precision from the session config reaches the model Keras builds after the
    session exists: the float16 matmuls overflow at 2**16, those batches are skipped (Keras's
    iteration count does not move, the scale halves), the others apply and the loss falls."""
    result, report = _run_keras_script(tmp_path)
    if not _keras_2():  # TF 2.16+: tf.keras is Keras 3, without TF1 sessions
        assert result.returncode != 0
        assert "npu_bridge.npu_init.set_keras_session_npu_config is not emulated with this " \
            "TensorFlow: its tf.keras is Keras 3" in result.stderr
        return
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert events[0] == {"event": "start", "tf_module": KERAS_SCRIPT_TF}
    batches = [(e["loss_scale"], e["iterations"]) for e in events if e["event"] == "batch"]
    assert len(batches) == 12
    scale, iterations, skipped = 65536.0, 0, 0
    for after, its in batches:
        if its == iterations:          # skipped: weights kept, scale halved
            assert after == scale / 2
            skipped += 1
        else:                          # applied: one more iteration, scale kept
            assert (its, after) == (iterations + 1, scale)
        scale, iterations = after, its
    assert skipped >= 1 and iterations >= 6
    counts = json.loads(report.read_text())
    assert (counts["steps_applied"], counts["steps_skipped"]) == (iterations, skipped)
    done = events[-1]
    assert done["event"] == "done" and done["last_loss"] < done["first_loss"]


def test_tf1_keras_script_in_force_fp32_applies_every_step(tmp_path):
    result, report = _run_keras_script(tmp_path, "--precision_mode=force_fp32")
    if not _keras_2():
        assert result.returncode != 0 and "is not emulated with this TensorFlow" in result.stderr
        return
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    batches = [(e["loss_scale"], e["iterations"]) for e in events if e["event"] == "batch"]
    assert batches == [(65536.0, i) for i in range(1, 13)]
    counts = json.loads(report.read_text())
    assert (counts["steps_applied"], counts["steps_skipped"]) == (12, 0)


# -- TF1 mode: Keras module paths that moved -----------------------------------------------------------
_MOVED_KERAS_SCRIPT = """\
import json, sys
import tensorflow as tf
sys.path.insert(0, sys.argv[1])
import installed_lib
from tensorflow.python.keras import backend as K
from tensorflow.python.keras.layers import Dense
from tensorflow.python.keras._impl.keras.layers import Conv2D
import tensorflow.python.keras.backend as KB
from keras.layers.core import Dense as CoreDense
from keras.backend_config import epsilon
from keras.utils.control_flow_util import smart_cond
from keras import backend_config
from keras.layers.normalization import BatchNormalization
from keras.layers.advanced_activations import LeakyReLU
import keras
print(json.dumps({"LeakyReLU": LeakyReLU is keras.layers.LeakyReLU,
                  "backend_config": backend_config.epsilon is epsilon,
                  "BatchNormalization": BatchNormalization is keras.layers.BatchNormalization,
"K": K is tf.keras.backend or K.epsilon is tf.keras.backend.epsilon,
                  "Dense": Dense is tf.keras.layers.Dense,
                  "Conv2D": Conv2D is tf.keras.layers.Conv2D,
                  "KB": KB is K, "CoreDense": CoreDense is tf.keras.layers.Dense,
                  "epsilon": epsilon(), "smart_cond": callable(smart_cond),
                  "library_keras": installed_lib.K.__name__}))
"""


def _moved_keras_script(mode):
    """The script above as a TF 2.6 user writes it where tf.keras is Keras 2.6: its
    ``keras.layers.normalization`` is a package, not TF 2.5's module, and nothing maps it, so the
    script imports the class ``keras.layers`` exports from where Keras 2.6 keeps it (the V1 batch
    norm under TF1 behaviour, as Keras 2.6 chooses at import, else the V2 one)."""
    if compat_keras.keras2_source_package() != "keras":
        return _MOVED_KERAS_SCRIPT
    module = "batch_normalization_v1" if mode else "batch_normalization"
    return _MOVED_KERAS_SCRIPT.replace("from keras.layers.normalization import",
                                       "from keras.layers.normalization.%s import" % module)


@tf1_names_on_tf2_only
@pytest.mark.parametrize("mode", [["--tf1"], []], ids=["tf1", "tf2"])
def test_moved_keras_paths_resolve_in_user_files_only(tmp_path, mode):
    """TF 1.15's tensorflow.python.keras and TF 2.6's keras.layers.core/backend_config/
    utils.control_flow_util give tf.keras's own classes in the script, in TF1 mode and for a TF2
    script run without it; an installed library (a folder with install metadata) importing
    tensorflow.python.keras keeps what it gets."""
    app, lib = tmp_path / "app", tmp_path / "lib"
    app.mkdir()
    (lib / "installed_lib-1.0.dist-info").mkdir(parents=True)
    (lib / "installed_lib.py").write_text("from tensorflow.python.keras import backend as K\n")
    (app / "train.py").write_text(_moved_keras_script(mode))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate"] + mode
                            + [str(app / "train.py"), str(lib)], env=env, cwd=str(tmp_path),
                            capture_output=True, text=True, timeout=300, check=False)
    if not _keras_2():  # Keras 3: no TF1 Keras, nothing mapped; TF 1.4 paths stay missing
        assert result.returncode != 0
        assert "No module named 'tensorflow.python.keras._impl'" in result.stderr
        return
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "LeakyReLU": True, "backend_config": True, "BatchNormalization": True, "K": True, "Dense": True, "Conv2D": True, "KB": True, "CoreDense": True,
        "epsilon": 1e-07, "smart_cond": True, "library_keras": "tensorflow.python.keras.backend"}


@tf1_names_on_tf2_only
def test_tf1_mode_gives_user_files_the_names_tf2_moved_out_of_framework_ops(tmp_path):
    script = tmp_path / "uses_ops.py"
    script.write_text(
        "import json\n"
        "import tensorflow as tf\n"
        "from tensorflow.python.framework import ops, dtypes\n"
        "from tensorflow.python.framework.ops import Tensor\n"
        "import tensorflow.python.framework.ops as ops2\n"
        "print(json.dumps([ops.Tensor is tf.Tensor, Tensor is tf.Tensor, ops2.Tensor is tf.Tensor,\n"
        "                  ops.IndexedSlices is tf.IndexedSlices,\n"
        "                  isinstance(tf.constant(1.0), ops.Tensor),\n"
        "                  ops.get_default_graph() is tf.get_default_graph(),\n"
        "                  dtypes.float32 == tf.float32]))\n"
        "ops.not_a_name\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--tf1",
                             str(script)], env=env, cwd=str(tmp_path), capture_output=True,
                            text=True, timeout=300, check=False)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [True] * 7, result.stderr[-3000:]
    assert result.returncode != 0
    assert "module 'tensorflow.python.framework.ops' has no attribute 'not_a_name'" \
        in result.stderr


_CONTRIB_MIXED_PRECISION_SCRIPT = """\
import json
import tensorflow as tf
from tensorflow.contrib.mixed_precision import LossScaleOptimizer, FixedLossScaleManager
from tensorflow_core.contrib.mixed_precision.python.loss_scale_manager import (
    ExponentialUpdateLossScaleManager)
x = tf.placeholder(tf.float32, [])
w = tf.get_variable("w", [], initializer=tf.ones_initializer())
mgr = ExponentialUpdateLossScaleManager(init_loss_scale=2.0 ** 20, incr_every_n_steps=1000,
                                        decr_every_n_nan_or_inf=1, decr_ratio=0.5)
opt = tf.contrib.mixed_precision.LossScaleOptimizer(tf.train.GradientDescentOptimizer(0.5), mgr)
train = opt.minimize(w * x)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    out = []
    for feed in [1.0, 1e34, 2.0]:
        sess.run(train, {x: feed})
        out.append([float(sess.run(w)), float(sess.run(mgr.get_loss_scale()))])
same = LossScaleOptimizer is tf.contrib.mixed_precision.LossScaleOptimizer
print(json.dumps({"steps": out, "same_optimizer": same}))
"""


def test_tf1_contrib_mixed_precision_skips_steps_whose_gradients_are_not_finite(tmp_path):
    """contrib's LossScaleOptimizer checks the gradients: 1e34 * 2**20 is inf in float32, so the
    second step is skipped (w stays 1 - 0.5 * 1, the scale halves); the others apply."""
    script = tmp_path / "uses_contrib_mixed_precision.py"
    script.write_text(_CONTRIB_MIXED_PRECISION_SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--tf1",
                             str(script)], env=env, cwd=str(tmp_path), capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["steps"] == [[0.5, 2.0 ** 20], [0.5, 2.0 ** 19], [0.5 - 0.5 * 2.0, 2.0 ** 19]]
    assert out["same_optimizer"] is True


def test_tf1_mode_gives_tf_slim_the_moved_ops_names_and_other_libraries_nothing(tmp_path):
    """tf-slim 1.1.0 (what tf.contrib.slim/layers map to) reads ops.Tensor, gone in TF 2.14:
    its modules get the TF 1.15 names; another installed library's import is left alone."""
    script = tmp_path / "imports_as_libraries.py"
    script.write_text(
        "import json, os, sysconfig\n"
        "lib = sysconfig.get_path('purelib')\n"
        "code = 'from tensorflow.python.framework import ops\\nfound = hasattr(ops, \"Tensor\")'\n"
        "out = {}\n"
        "for name in ('tf_slim.layers.optimizers', 'some_library.module'):\n"
        "    g = {'__name__': name, '__file__': os.path.join(lib, *name.split('.')) + '.py'}\n"
        "    exec(compile(code, g['__file__'], 'exec'), g)\n"
        "    out[name] = g['found']\n"
        "print(json.dumps(out))\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--tf1",
                             str(script)], env=env, cwd=str(tmp_path), capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    from tensorflow.python.framework import ops  # pylint: disable=import-outside-toplevel
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "tf_slim.layers.optimizers": True, "some_library.module": hasattr(ops, "Tensor")}
