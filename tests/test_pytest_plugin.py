"""The pytest plugin shipped with the package (npu_loss_scale.pytest_plugin).

User test files are run with pytest's own ``pytester``, in this process (TensorFlow is already
loaded) unless said otherwise; the plugin reaches those inner runs the way it reaches users:
through its ``pytest11`` entry point.
"""
import os
import re
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

try:
    from importlib import metadata
except ImportError:   # Python 3.7 (the TF 1.15 stack): pytest's own dependency, the backport
    import importlib_metadata as metadata

import npu_loss_scale as nls
from tf_versions import tf2_only
from npu_loss_scale.cli import emulate
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import saturation
from npu_loss_scale.device import precision
from npu_loss_scale.pytest_plugin import (NPUDevice, NPURanks, assert_no_overflow,
                                          assert_step_skipped, overflow_sites)

pytest_plugins = ("pytester",)

HERE = os.path.dirname(os.path.abspath(__file__))
USER_SCRIPT = os.path.join(HERE, "scripts", "ascend_user_train.py")
RESUME_SCRIPT = os.path.join(HERE, "scripts", "ascend_user_resume.py")
PLUGIN = "npu_loss_scale.pytest_plugin"


def _pytest11(entry_points):
    """The ``pytest11`` entry points among ``entry_points``: a dict of groups from
    ``metadata.entry_points()`` before Python 3.10, a selectable collection after, a list from a
    distribution."""
    if isinstance(entry_points, dict):
        return list(entry_points.get("pytest11", ()))
    return [e for e in entry_points if e.group == "pytest11"]


def _entry_points():
    """The plugin's entry points, once each (Python 3.9 lists a distribution once per path
    entry it is found on: the checkout on PYTHONPATH and its editable install)."""
    found = {}
    for entry in _pytest11(metadata.entry_points()):
        if entry.value == PLUGIN:
            found.setdefault((entry.name, entry.value), entry)
    return list(found.values())


# -- how the plugin is loaded -----------------------------------------------------------------------
def test_plugin_is_loaded_through_its_entry_point(pytestconfig):
    found = _entry_points()
    assert [e.name for e in found] == ["npu_loss_scale"], (
        "no pytest11 entry point for %s: the package is installed without it (reinstall it: "
        "bash scripts/setup_env.sh, or pip install -e .)" % PLUGIN)
    assert _pytest11(metadata.distribution("npu-loss-scale").entry_points)
    manager = pytestconfig.pluginmanager
    assert manager.get_plugin("npu_loss_scale") is sys.modules[PLUGIN]
    from_distributions = {id(plugin): dist for plugin, dist in manager.list_plugin_distinfo()}
    assert id(sys.modules[PLUGIN]) in from_distributions, (
        "the plugin was registered by the suite's conftest, not by pytest from the entry point")
    assert from_distributions[id(sys.modules[PLUGIN])].metadata["Name"] == "npu-loss-scale"


def test_loading_the_plugin_imports_neither_tensorflow_nor_the_package_modules(pytester):
    """A user test that does not use the plugin runs with no TensorFlow imported by it."""
    pytester.makepyfile(test_bare="""
        import sys

        def test_nothing_heavy_is_loaded(request):
            plugin = sys.modules["npu_loss_scale.pytest_plugin"]
            assert request.config.pluginmanager.is_registered(plugin)
            assert "tensorflow" not in sys.modules
            loaded = sorted(m for m in sys.modules if m.startswith("npu_loss_scale."))
            assert loaded == ["npu_loss_scale.pytest_plugin"], loaded
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *_plugin_args())
    result.assert_outcomes(passed=1)


def _plugin_args():
    """``-p`` for the plugin when no entry point is installed (a checkout run without
    installing; test_plugin_is_loaded_through_its_entry_point fails then)."""
    return [] if _entry_points() else ["-p", PLUGIN]


@pytest.fixture(scope="module", autouse=True)
def _modules_loaded_before_inner_runs():
    """An in-process pytester run forgets the modules it imported; import what the plugin uses
    first, so that no module of the package is imported twice."""
    assert emulate.install_shim()
    import npu_bridge.npu_init  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    emulate.uninstall_shim()
    from npu_loss_scale.ascend import (  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        ranks)
    yield


def _global_state():
    return (emulation.get_device_sat_mode(), os.environ.get("NPU_LOSS_SCALE_BACKEND"),
            os.environ.get("NPU_LOSS_SCALE_SAT_MODE"), list(precision._patched),  # pylint: disable=protected-access
            precision._default_mode[0], saturation.every_op_active(),  # pylint: disable=protected-access
            emulate.SHIM_DIR in sys.path, "npu_bridge" in sys.modules)


def _run_inner(pytester, **files):
    pytester.makepyfile(**files)
    before = _global_state()
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
                                *_plugin_args())
    assert _global_state() == before, "the plugin left global state changed"
    return result


# -- npu_device -------------------------------------------------------------------------------------
DEVICE_TESTS = """
    import numpy as np
    import pytest
    import tensorflow as tf

    import npu_loss_scale as nls

    F16_MAX = 65504.0


    def _overflow_eagerly():
        return nls.saturate(tf.constant([1e5], tf.float16)).numpy()


    def test_register_starts_empty_in_saturation_mode(npu_device):
        assert npu_device.sat_mode == "saturation" and nls.get_device_sat_mode() == 0
        assert npu_device.status() == [0] * 8
        assert _overflow_eagerly()[0] == F16_MAX
        assert npu_device.status() == [1, 0, 0, 0, 0, 0, 0, 0]
        npu_device.clear()
        assert npu_device.status() == [0] * 8


    def test_register_is_fresh_again(npu_device):
        assert npu_device.status() == [0] * 8     # the previous test's overflow is forgotten


    @pytest.mark.npu_device(sat_mode="inf_nan")
    def test_marker_selects_inf_nan(npu_device):
        assert nls.get_device_sat_mode() == 1
        assert np.isposinf(_overflow_eagerly()[0])
        assert npu_device.status() == [0] * 8


    @pytest.mark.parametrize("npu_device", ["saturation", "inf_nan"], indirect=True)
    def test_parametrised_modes(npu_device):
        assert nls.get_device_sat_mode() == {"saturation": 0, "inf_nan": 1}[npu_device.sat_mode]


    def test_mode_switch_inside_a_test(npu_device):
        npu_device.sat_mode = "inf_nan"
        assert nls.get_device_sat_mode() == 1


    @pytest.mark.npu_device(saturate_every_op=True)
    def test_every_float16_op_saturates(npu_device):
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            x = tf.constant([300.0, 3.0], tf.float16)
            y = x * x                               # 90000 > 65504
            assert sess.run(y).tolist() == [F16_MAX, 9.0]
            assert npu_device.status(sess)[0] == 1


    @pytest.mark.npu_device(precision_mode="allow_mix_precision")
    def test_precision_mode_runs_float32_matmuls_in_float16(npu_device):
        with tf.Graph().as_default():
            y = tf.identity(tf.matmul(tf.constant([[300.0]]), tf.constant([[300.0]])))
            with tf.compat.v1.Session() as sess:
                assert sess.run(y).tolist() == [[F16_MAX]]
                assert npu_device.status(sess)[0] == 1
        eager = tf.matmul(tf.constant([[300.0]]), tf.constant([[300.0]]))
        traced = tf.function(lambda: tf.matmul(tf.constant([[300.0]]), tf.constant([[300.0]])))()
        assert eager.numpy().tolist() == traced.numpy().tolist() == [[F16_MAX]]


    def test_without_precision_mode_float32_stays_float32(npu_device):
        with tf.Graph().as_default():
            y = tf.identity(tf.matmul(tf.constant([[300.0]]), tf.constant([[300.0]])))
            with tf.compat.v1.Session() as sess:
                assert sess.run(y).tolist() == [[90000.0]]
        assert tf.matmul(tf.constant([[300.0]]), tf.constant([[300.0]])).numpy()[0, 0] == 90000.0
"""


@tf2_only  # its test file reads the register eagerly
def test_npu_device_fixture_sets_up_and_restores_the_emulated_device(pytester):
    result = _run_inner(pytester, test_device=DEVICE_TESTS)
    result.assert_outcomes(passed=9)


def test_npu_device_refuses_bad_options(pytester):
    result = _run_inner(pytester, test_bad_device="""
        import pytest

        @pytest.mark.npu_device(sat_mode="fp8")
        def test_bad_mode(npu_device):
            pass

        @pytest.mark.npu_device(precision="force_fp16")
        def test_unknown_option(npu_device):
            pass
    """)
    result.assert_outcomes(errors=2)
    out = result.stdout.str()
    assert ("ValueError: sat_mode must be 'saturation' (or 0) or 'inf_nan' (or 1); got 'fp8'"
            in out)
    assert ("TypeError: @pytest.mark.npu_device: unknown argument(s) ['precision']; accepted: "
            "sat_mode, saturate_every_op, precision_mode" in out)


def test_npu_device_checks_its_arguments_directly():
    with pytest.raises(ValueError, match="sat_mode must be .*got 2"):
        NPUDevice(sat_mode=2)
    with pytest.raises(TypeError, match="saturate_every_op must be True or False; got 'yes'"):
        NPUDevice(saturate_every_op="yes")
    emulation.set_device_sat_mode(emulation.INF_NAN)     # the conftest restores saturation
    before = _global_state()
    with pytest.raises(ValueError, match="precision_mode must be one of"):
        NPUDevice(sat_mode="saturation", precision_mode="fp8")
    assert _global_state() == before                      # INF/NaN again: nothing half set up
    with pytest.raises(FileNotFoundError, match="script 'no_such.py' does not exist"):
        device = NPUDevice()
        try:
            device.load_script("no_such.py")
        finally:
            device.close()
    assert _global_state() == before


# -- a user's own test of an Ascend training script ----------------------------------------------
USER_TESTS = """
    import pytest

    from npu_loss_scale.pytest_plugin import assert_no_overflow, assert_step_skipped

    TRAIN = %r


    def test_scale_backs_off_until_the_float16_gradient_fits(npu_device):
        train = npu_device.load_script(TRAIN)
        steps = train.main(steps=4, init_loss_scale=2.0 ** 17)
        assert_step_skipped(steps[0])    # 2**17 > 65504: skipped, the scale halves
        assert_step_skipped(steps[1])    # 2**16 > 65504 as well
        assert_no_overflow(steps[2])     # 2**15 fits
        assert_no_overflow(steps[3])


    def test_the_script_as_a_program(npu_device, capsys):
        npu_device.run_script(TRAIN, "--steps=3", "--init_loss_scale=65536")
        assert capsys.readouterr().out.splitlines() == [
            "step 0: loss scale 65536, finite False",
            "step 1: loss scale 32768, finite True",
            "step 2: loss scale 32768, finite True"]


    @pytest.mark.npu_device(sat_mode="inf_nan")
    def test_inf_nan_mode_skips_the_same_steps(npu_device):
        steps = npu_device.load_script(TRAIN).main(steps=3, init_loss_scale=2.0 ** 16)
        assert_step_skipped(steps[0])
        assert_no_overflow(steps[1])


    def test_in_float32_nothing_overflows(npu_device):
        steps = npu_device.load_script(TRAIN).main(steps=1, precision_mode="force_fp32")
        assert_no_overflow(steps[0])


    def test_expecting_no_overflow_on_an_overflowed_step_fails(npu_device):
        steps = npu_device.load_script(TRAIN).main(steps=1, init_loss_scale=2.0 ** 17)
        assert_no_overflow(steps[0])


    def test_expecting_a_skip_on_an_applied_step_fails(npu_device):
        steps = npu_device.load_script(TRAIN).main(steps=1, init_loss_scale=2.0 ** 15)
        assert_step_skipped(steps[0])
""" % USER_SCRIPT


def test_a_users_ascend_script_is_tested_in_a_few_lines(pytester):
    result = _run_inner(pytester, test_user_train=USER_TESTS)
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines([
        "*test_expecting_no_overflow_on_an_overflowed_step_fails*",
        "E*AssertionError: the step overflowed (and was skipped): loss scale 131072 -> 65536, "
        "skipped steps 1, global step 0*"])
    result.stdout.fnmatch_lines([
        "*test_expecting_a_skip_on_an_applied_step_fails*",
        "E*AssertionError: the step was applied: no overflow was detected: loss scale 32768 -> "
        "32768, skipped steps 0, global step 1*"])


def _guide_test(index=0):
    """The testing guide's Python blocks: the step assertions' test, then the resume check's."""
    with open(os.path.join(HERE, "..", "docs", "guides", "testing.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 2
    return blocks[index]


def test_the_guide_example_passes_as_written(pytester):
    """The testing guide's test (once the README's), with tests/scripts/ascend_user_train.py as
    its train.py."""
    with open(USER_SCRIPT, encoding="utf-8") as f:
        pytester.path.joinpath("train.py").write_text(f.read(), encoding="utf-8")
    result = _run_inner(pytester, test_train=_guide_test())
    result.assert_outcomes(passed=1)


def test_the_guide_resume_example_passes_and_fails_as_it_says(pytester):
    """The testing guide's resume check, with tests/scripts/ascend_user_resume.py as its
    train.py: it passes; with the script's Saver over the trainable variables, it fails with the
    message the guide shows."""
    with open(RESUME_SCRIPT, encoding="utf-8") as f:
        script = f.read()
    pytester.path.joinpath("train.py").write_text(script, encoding="utf-8")
    result = _run_inner(pytester, test_resume=_guide_test(1))
    result.assert_outcomes(passed=1)
    broken = script.replace('saver_var_list="global"', 'saver_var_list="trainable"')
    assert broken != script
    pytester.path.joinpath("train.py").write_text(broken, encoding="utf-8")
    result = _run_inner(pytester, test_resume=_guide_test(1))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E*AssertionError: the resumed run differs from the straight run at step 6, the first "
        "after the restart: overflowed False (straight) vs True (resumed), *loss_scale 32768.0 "
        "(straight) vs 131072.0 (resumed), global_step 4 (straight) vs 0 (resumed)*"])


def test_the_readme_quick_start_test_passes_with_the_readme_script(pytester):
    """README's quick start: its Ascend script as train.py and its pytest test beside it."""
    sys.path.insert(0, HERE)
    try:
        from test_readme_quickstart import quick_start  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(HERE)
    train, test = quick_start()[0][:2]
    pytester.path.joinpath("train.py").write_text(train, encoding="utf-8")
    result = _run_inner(pytester, test_train=test)
    result.assert_outcomes(passed=1)


def test_a_failing_script_fails_the_test_with_its_exit_code(pytester, tmp_path):
    script = tmp_path / "gives_up.py"
    script.write_text("import sys\nfrom npu_bridge.npu_init import *\nsys.exit(3)\n")
    result = _run_inner(pytester, test_gives_up="""
        def test_run(npu_device):
            npu_device.run_script(%r)
    """ % str(script))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: script *gives_up.py exited with code 3*"])


# -- assertion helpers on every front end -------------------------------------------------------------
def test_helpers_read_a_loss_scale_hook_and_its_history(graph, session):
    w = tf.compat.v1.get_variable("w", initializer=tf.ones([1]), use_resource=True)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                    nls.FixedLossScaleManager(2.0 ** 17))
    loss = tf.reduce_sum(w)
    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    hook = nls.LossScaleHook(optimizer=opt, every_n_steps=1000, log_overflows=False)
    with pytest.raises(ValueError, match="LossScaleHook has recorded no step yet"):
        assert_no_overflow(hook)
    hook.begin()
    session.run(tf.compat.v1.global_variables_initializer())
    hook.after_create_session(session, None)
    for overflow in (True, False):
        if overflow:
            session.run(emulation.record(True))   # an overflow the register saw in this step
        args = hook.before_run(None)
        values = session.run([train_op, args.fetches])[1]
        hook.after_run(None, tf.compat.v1.train.SessionRunValues(values, None, None))
        if overflow:
            assert_step_skipped(hook)
            with pytest.raises(AssertionError, match=r"the step overflowed \(and was skipped\): "
                                                     r"loss scale 131072.*iteration 1"):
                assert_no_overflow(hook)
        else:
            assert_no_overflow(hook)
            with pytest.raises(AssertionError, match="the step was applied"):
                assert_step_skipped(hook)
    assert_step_skipped(hook.history[0])
    assert_no_overflow(hook.history[1])


@tf2_only  # TF2 Keras
def test_helpers_read_the_keras_optimizer_after_a_step():
    from npu_loss_scale.keras import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    var = tf.Variable([1.0])
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), initial_scale=4.0)
    opt.apply_gradients([(tf.constant([np.inf]), var)])
    assert var.numpy().tolist() == [1.0]        # skipped
    assert_step_skipped(opt)
    with pytest.raises(AssertionError, match="the step overflowed .and was skipped.: loss scale "
                                             "after the step 2$"):
        assert_no_overflow(opt)
    opt.apply_gradients([(tf.constant([4.0]), var)])
    assert_no_overflow(opt)
    with pytest.raises(AssertionError, match="the step was applied: no overflow was detected"):
        assert_step_skipped(opt)
    assert var.numpy()[0] < 1.0                 # applied


@tf2_only  # GradScaler runs eagerly
def test_helpers_read_the_grad_scaler_between_step_and_update():
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=8.0)
    scaler.step(opt, [(tf.constant([np.inf]), var)])
    assert_step_skipped(scaler)
    with pytest.raises(AssertionError, match="the step overflowed.*scale 8"):
        assert_no_overflow(scaler)
    scaler.update()
    with pytest.raises(ValueError, match=r"before scaler.update\(\)"):
        assert_no_overflow(scaler)
    scaler.step(opt, [(tf.constant([8.0]), var)])
    assert_no_overflow(scaler)
    with pytest.raises(AssertionError, match="the step was applied"):
        assert_step_skipped(scaler)
    scaler.update()


def test_helpers_refuse_what_is_not_a_step_and_say_what_is(graph):
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                    nls.FixedLossScaleManager(8.0))
    with pytest.raises(TypeError, match=r"pass the step's report, not the optimizer.*"
                                        r"sess.run\(\[train_op, opt.step_report\]\)"):
        assert_step_skipped(opt)
    with pytest.raises(TypeError, match="step must be the dict of sess.run.*got 42 .type int"):
        assert_no_overflow(42)
    with pytest.raises(TypeError, match="needs a 'finite' key.*got keys \\['loss'\\]"):
        assert_no_overflow({"loss": 1.0})
    with pytest.raises(ValueError, match="no overflow check"):
        assert_step_skipped({"finite": None, "loss_scale": 8.0})
    assert_step_skipped({"finite": np.bool_(False)})
    assert_no_overflow({"finite": np.bool_(True)})


# -- overflow_sites (against the localisation contract) ------------------------------------------------
def _site(name, direction):
    return types.SimpleNamespace(op_name=name, direction=direction, dtype="float16",
                                 magnitude=1e5, order=0, first=True)


def _fake_localisation(record, enabled=True):
    module = types.ModuleType("npu_loss_scale.device.localisation")
    module.last_record = lambda: record
    module.enabled = lambda: enabled
    return module


def test_a_step_s_failure_names_the_recorded_sites_only_while_localisation_is_on(monkeypatch):
    """A record an earlier localised graph of the process left is no record of a step made with
    localisation off: the message leaves its sites out."""
    record = types.SimpleNamespace(step=3, sites=[_site("old/MatMul", "forward")], skipped=True)
    overflowed = {"finite": False, "next_loss_scale": 2.0}
    for enabled, named in ((False, False), (True, True)):
        monkeypatch.setitem(sys.modules, "npu_loss_scale.device.localisation",
                            _fake_localisation(record, enabled))
        with pytest.raises(AssertionError) as failed:
            assert_no_overflow(overflowed)
        assert ("overflow sites: old/MatMul" in str(failed.value)) == named, str(failed.value)


def test_overflow_sites_come_from_the_localisation_record(monkeypatch):
    sites = [_site("dense/MatMul", "forward"), _site("gradients/dense/MatMul_grad", "backward")]
    record = types.SimpleNamespace(step=7, sites=sites, first=sites[0], skipped=True)
    monkeypatch.setitem(sys.modules, "npu_loss_scale.device.localisation", _fake_localisation(record))
    assert overflow_sites() == sites
    assert_step_skipped(record)
    with pytest.raises(AssertionError, match=r"step 7, overflow sites 2; overflow sites: "
                                             r"dense/MatMul \(forward, float16\), "
                                             r"gradients/dense/MatMul_grad \(backward"):
        assert_no_overflow(record)
    applied = types.SimpleNamespace(step=8, sites=sites[:1], first=sites[0], skipped=False)
    with pytest.raises(AssertionError, match="it overflowed but was applied anyway"):
        assert_step_skipped(applied)
    clean = types.SimpleNamespace(step=9, sites=[], first=None, skipped=False)
    assert_no_overflow(clean)
    monkeypatch.setitem(sys.modules, "npu_loss_scale.device.localisation", _fake_localisation(clean))
    assert overflow_sites() == []


def test_overflow_sites_say_when_nothing_is_recorded_or_localisation_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "npu_loss_scale.device.localisation", _fake_localisation(None))
    with pytest.raises(RuntimeError, match="no training step has been recorded yet"):
        overflow_sites()
    monkeypatch.setitem(sys.modules, "npu_loss_scale.device.localisation", None)   # not installed
    with pytest.raises(RuntimeError, match="needs npu_loss_scale.device.localisation"):
        overflow_sites()


def test_overflow_sites_of_a_real_step_name_the_op_that_overflowed(pytester):
    """With the real localisation module: a softmax fed huge fp16 logits is named, forward, and
    the helpers read the step report of the optimizer that skipped it."""
    result = _run_inner(pytester, test_user_sites="""
        import numpy as np
        import tensorflow as tf
        import npu_loss_scale as nls
        from npu_loss_scale import localisation, saturation
        from npu_loss_scale.pytest_plugin import (assert_no_overflow, assert_step_skipped,
                                                  overflow_sites)

        def test_the_softmax_exp_overflows_first(npu_device):
            localisation.enable()
            try:
                with tf.Graph().as_default():
                    with saturation.saturate_every_op():
                        x = tf.compat.v1.placeholder(tf.float16, [2, 4], name="x")
                        w = tf.compat.v1.get_variable("w", initializer=tf.eye(4) * 4.0)
                        logits = tf.matmul(x, tf.cast(w, tf.float16), name="logits")
                        e = tf.exp(logits, name="softmax_exp")
                        probs = e / tf.reduce_sum(e, axis=-1, keepdims=True)
                        loss = -tf.reduce_mean(tf.math.log(tf.cast(probs, tf.float32) + 1e-3))
                        opt = nls.NPULossScaleOptimizer(
                            tf.compat.v1.train.GradientDescentOptimizer(0.1),
                            nls.FixedLossScaleManager(1.0))
                        train = opt.minimize(
                            loss, global_step=tf.compat.v1.train.get_or_create_global_step())
                    with tf.compat.v1.Session() as sess:
                        sess.run(tf.compat.v1.global_variables_initializer())
                        _, report = sess.run([train, opt.step_report],
                                             {x: np.ones([2, 4], np.float16)})
                        assert_no_overflow(report)
                        _, report = sess.run([train, opt.step_report],
                                             {x: np.full([2, 4], 3.0, np.float16)})
                        assert_step_skipped(report)
                sites = overflow_sites()
                assert sites[0].op_name == "softmax_exp" and sites[0].first
                assert sites[0].direction == "forward" and sites[0].dtype == "float16"
                assert "logits" not in [s.op_name for s in sites]
            finally:
                localisation.disable()
                localisation.reset()
        """)
    result.assert_outcomes(passed=1)


# -- npu_ranks ------------------------------------------------------------------------------------------
RANK_TESTS = """
    import os
    import time


    def allreduce_then_rank_one_gives_up(offset):
        import tensorflow.compat.v1 as tf
        from npu_bridge.npu_init import get_rank_id, get_rank_size, hccl_ops
        rank = get_rank_id()
        with tf.Graph().as_default():
            total = hccl_ops.allreduce(tf.constant([float(rank) + offset]), "sum")
            with tf.Session() as sess:
                total = float(sess.run(total)[0])
        print("rank %d total %s" % (rank, total))
        if rank == 1:
            raise RuntimeError("rank one gives up")
        return rank, get_rank_size(), os.environ["DEVICE_ID"], total


    def sleep_long():
        time.sleep(600)


    def test_two_ranks_run_a_function_and_a_failing_rank_is_named(npu_ranks):
        result = npu_ranks(2, allreduce_then_rank_one_gives_up, 1.0, timeout=240, check=False)
        assert result.returncodes[0] == 0
        assert result.values[0] == (0, 2, "0", 3.0)     # (0 + 1) + (1 + 1) over both ranks
        assert result.failed_ranks() == [1] and result.values[1] is None
        assert "rank 1 total 3.0" in result.stdout[1]
        assert "rank one gives up" in result.stderr[1]
        result.check()     # fails the test, naming rank 1


    def test_a_rank_outliving_the_timeout_is_killed(npu_ranks):
        npu_ranks(1, sleep_long, timeout=8)
"""


@pytest.mark.distributed
def test_npu_ranks_runs_functions_in_emulated_ranks_and_names_failures(pytester):
    result = _run_inner(pytester, test_ranks=RANK_TESTS)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*test_two_ranks_run_a_function_and_a_failing_rank_is_named*",
        "*RankFailed: rank 1 of 2 (test_ranks.allreduce_then_rank_one_gives_up) exited with "
        "code 1; its stderr ends with:*"])
    result.stdout.fnmatch_lines(["*RuntimeError: rank one gives up*"])
    result.stdout.fnmatch_lines([
        "*RankFailed: rank 0 of 1 (test_ranks.sleep_long) was still running at the timeout and "
        "was killed*"])


def test_npu_ranks_checks_its_arguments(tmp_path):
    ranks = NPURanks(str(tmp_path))
    with pytest.raises(ValueError, match="n must be an int >= 1 .the number of ranks.; got 0"):
        ranks(0, USER_SCRIPT)
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0; got -1"):
        ranks(1, USER_SCRIPT, timeout=-1)
    with pytest.raises(FileNotFoundError, match="script 'nope.py' does not exist"):
        ranks(1, "nope.py")
    with pytest.raises(TypeError, match="target must be a function or the path of a script"):
        ranks(1, 42)

    def local():
        pass
    with pytest.raises(ValueError, match="defined inside another function"):
        ranks(1, local)
    with pytest.raises(TypeError, match="keyword arguments \\['x'\\] go to functions only"):
        ranks(1, USER_SCRIPT, x=1)

