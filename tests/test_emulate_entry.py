"""`python -m npu_loss_scale.emulate`: unmodified Ascend scripts on CPU, never shadowing a real npu_bridge."""
import json
import os
import subprocess
import sys

import pytest

import npu_loss_scale as nls
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.cli import emulate
from npu_loss_scale.device import register as emulation

HERE = os.path.dirname(os.path.abspath(__file__))
BERT_SCRIPT = os.path.join(HERE, "scripts", "ascend_bert_loss_scale.py")
STAND_IN = os.path.join(HERE, "stand_in")


def _drop_modules(*tops):
    for name in list(sys.modules):
        if name.split(".", 1)[0] in tops:
            del sys.modules[name]


@pytest.fixture
def shim():
    """The emulate shim installed in this process; removed afterwards."""
    _drop_modules("npu_bridge", "hccl")
    assert emulate.install_shim()
    yield
    emulate.uninstall_shim()
    _drop_modules("npu_bridge", "hccl")


def _run(args, extra_env=None, cwd=None):
    env = dict(os.environ)
    env.pop(detection.ENV_VAR, None)          # let the backend be chosen as a user's would be
    env.pop(emulation.MODE_ENV_VAR, None)
    env.pop("RANK_SIZE", None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate"] + args, env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def _events(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


# -- in process ----------------------------------------------------------------------------------
def test_shim_resolves_the_ascend_loss_scale_names_to_this_package(shim):
    from npu_bridge.estimator.npu import (  # pylint: disable=import-outside-toplevel
        npu_loss_scale_manager, npu_loss_scale_optimizer)
    assert issubclass(npu_loss_scale_optimizer.NPULossScaleOptimizer, nls.NPULossScaleOptimizer)
    assert npu_loss_scale_manager.FixedLossScaleManager is nls.FixedLossScaleManager
    assert (npu_loss_scale_manager.ExponentialUpdateLossScaleManager
            is nls.ExponentialUpdateLossScaleManager)
    assert npu_loss_scale_manager.LossScaleManager is nls.LossScaleManager
    names = {}
    exec("from npu_bridge.npu_init import *", names)  # pylint: disable=exec-used
    assert names["NPULossScaleOptimizer"] is npu_loss_scale_optimizer.NPULossScaleOptimizer
    for name in ("FixedLossScaleManager", "ExponentialUpdateLossScaleManager"):
        assert names[name] is getattr(nls, name)
    assert names["get_rank_size"]() == 1 and names["get_rank_id"]() == 0
    assert names["npu_config_proto"]().allow_soft_placement


def test_shim_modes_and_status_ops_are_the_emulated_ones(shim, monkeypatch):
    from npu_bridge.estimator.npu import npu_plugin  # pylint: disable=import-outside-toplevel
    from npu_bridge.helper import helper  # pylint: disable=import-outside-toplevel
    npu_plugin.set_device_sat_mode(1)
    assert nls.is_inf_nan_enabled() and npu_plugin.is_inf_nan_enabled()
    npu_plugin.set_device_sat_mode(0)
    assert nls.get_device_sat_mode() == 0
    gen_ops = helper.get_gen_ops()
    assert gen_ops.npu_get_float_status_v2 is emulation.npu_get_float_status_v2
    assert gen_ops.npu_clear_float_status_v2 is emulation.npu_clear_float_status_v2
    with pytest.raises(AttributeError, match="not emulated.*float-status"):
        gen_ops.npu_dropout  # pylint: disable=pointless-statement
    # the shim is not a device: the automatic choice stays the emulation
    monkeypatch.delenv(detection.ENV_VAR, raising=False)
    assert not detection.npu_bridge_available()
    assert detection.get_backend_name() == "emulation"


def test_shim_is_not_installed_over_an_importable_npu_bridge(monkeypatch):
    _drop_modules("npu_bridge", "hccl")
    monkeypatch.syspath_prepend(STAND_IN)  # stands for a real npu_bridge here
    try:
        assert emulate.real_npu_bridge_origin().startswith(STAND_IN)
        assert not emulate.install_shim()
        assert emulate.SHIM_DIR not in sys.path
    finally:
        _drop_modules("npu_bridge", "hccl")


def test_entry_point_needs_a_script():
    with pytest.raises(SystemExit) as exit_info:
        emulate.main([])
    assert exit_info.value.code == 2


def test_entry_point_splits_its_own_options_from_the_scripts():
    args = emulate._parse(["--sat-mode", "1", "--saturate-every-op", "s.py", "--sat-mode=0",  # pylint: disable=protected-access
                           "-m", "x"])
    assert (args.sat_mode, args.saturate_every_op, args.script) == (1, True, "s.py")
    assert args.script_args == ["--sat-mode=0", "-m", "x"]
    args = emulate._parse(["-m", "pkg.mod", "--flag"])  # pylint: disable=protected-access
    assert (args.module, args.script, args.script_args) == ("pkg.mod", None, ["--flag"])


# -- unmodified scripts, in a fresh interpreter ---------------------------------------------------
@pytest.mark.slow
def test_bert_script_with_dynamic_scale_skips_saturated_steps_and_recovers(tmp_path):
    """2**17 and 2**16 overflow float16 (gradient 1 * scale > 65504); 2**15 does not.

    With --saturate-every-op the overflowed gradients are ±65504, finite: only the emulated
    register catches them. decr_every_n_nan_or_inf=2, decr_ratio=0.5: two skips per halving.
    """
    result = _run(["--saturate-every-op", BERT_SCRIPT, "--npu_bert_loss_scale=0",
                   "--init_loss_scale_value=131072", "--num_train_steps=6"], cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    events = _events(result.stdout)
    optimizer = events[0]
    assert optimizer == {"event": "optimizer", "is_distributed": False,
                         "manager": "ExponentialUpdateLossScaleManager",
                         "manager_module": "npu_loss_scale.scaling.managers",
                         "optimizer_module":
                             "npu_bridge.estimator.npu.npu_loss_scale_optimizer"}
    steps = [(e["finite"], e["loss_scale"], e["global_step"]) for e in events if e["event"] == "step"]
    assert steps == [(False, 131072.0, 0), (False, 65536.0, 0),
                     (False, 65536.0, 0), (False, 32768.0, 0),
                     (True, 32768.0, 1), (True, 32768.0, 2)]
    # two applied steps of lr 0.25 on the clipped gradient (1/sqrt(2), 1/sqrt(2))
    kernel = events[-1]["kernel"]
    assert kernel == pytest.approx([1.0 - 2 * 0.25 / 2 ** 0.5] * 2, abs=1e-6)


@pytest.mark.slow
def test_bert_script_with_fixed_scale_in_inf_nan_mode_applies_every_finite_step(tmp_path):
    result = _run(["--sat-mode", "1", BERT_SCRIPT, "--npu_bert_loss_scale=1024",
                   "--num_train_steps=3"], cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    events = _events(result.stdout)
    assert events[0]["manager"] == "FixedLossScaleManager"
    steps = [(e["finite"], e["loss_scale"], e["global_step"]) for e in events if e["event"] == "step"]
    assert steps == [(True, 1024.0, 1), (True, 1024.0, 2), (True, 1024.0, 3)]


@pytest.mark.slow
def test_bert_script_on_several_ranks_asks_for_distributed_agreement(tmp_path):
    result = _run([BERT_SCRIPT, "--num_train_steps=1"], extra_env={"RANK_SIZE": "2"},
                  cwd=str(tmp_path))
    events = _events(result.stdout)
    assert events and events[0]["is_distributed"] is True
    assert result.returncode != 0
    assert "RANK_SIZE=2" in result.stderr and "single rank" in result.stderr


@pytest.mark.slow
def test_a_real_npu_bridge_is_used_as_is(tmp_path):
    script = tmp_path / "which_bridge.py"
    script.write_text("import npu_bridge\nprint(npu_bridge.__file__)\n")
    result = _run([str(script)], extra_env={"PYTHONPATH": STAND_IN}, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().startswith(STAND_IN)
    assert "using the real npu_bridge" in result.stderr
