"""The command-line tools (``npu-emulate``, ``npu-loss-scale``), the package's warning
categories and logger, and the fused kernel's build messages and platform guard."""
import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale import __main__ as cli
from npu_loss_scale._internal import kernels as _kernels
from npu_loss_scale._internal import messages as _messages
from npu_loss_scale import agreement
from npu_loss_scale.agreement import watchdog
from npu_loss_scale.cli import emulate
from npu_loss_scale.optimizers import loss_scale as optimizer
from npu_loss_scale.ascend import ranks
from npu_loss_scale.device import precision
from tf_versions import tf2_only

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _python(code, extra_env=None, cwd=None):
    """Runs ``code`` in a fresh interpreter with this checkout importable."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")]
                                                    if p]))
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


# -- npu-emulate's options -------------------------------------------------------------------------
def test_help_lists_every_choice_and_examples_without_importing_tensorflow():
    done = _python("import json, sys\n"
                   "from npu_loss_scale import emulate, __main__ as cli\n"
                   "print(json.dumps([emulate.build_parser().format_help(),\n"
                   "                  cli.build_parser().format_help(),\n"
                   "                  'tensorflow' in sys.modules]))\n")
    assert done.returncode == 0, done.stderr
    emulate_help, cli_help, tf_imported = json.loads(done.stdout)
    assert not tf_imported
    flat = " ".join(emulate_help.split())
    for mode in precision.PRECISION_MODES:       # the list the emulation itself applies
        assert mode in flat, mode
    assert "--sat-mode {saturation,inf_nan}" in flat and "0 and 1 are accepted" in flat
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        assert dtype in flat
    for group in ("emulated device:", "script compatibility:", "several ranks:",
                  "diagnostics:", "examples:"):
        assert group in emulate_help, group
    assert "--ranks N, -np N" in emulate_help and "--version" in emulate_help
    assert "report" in cli_help and "build-kernel" in cli_help and "examples:" in cli_help


@pytest.mark.parametrize("main", [emulate.main, cli.main], ids=["npu-emulate", "npu-loss-scale"])
def test_version(main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.split()[-1] == nls.__version__


@pytest.mark.parametrize("value, mode", [("saturation", 0), ("inf_nan", 1), ("0", 0), ("1", 1),
                                         ("INF_NAN", 1)])
def test_sat_mode_by_name_or_number(value, mode):
    args = emulate._parse(["--sat-mode", value, "s.py"])  # pylint: disable=protected-access
    assert args.sat_mode == mode and args.script == "s.py"


@pytest.mark.parametrize("value, mode", [("inf_nan", 1), ("Saturation", 0), ("1", 1), ("", 0)])
def test_the_sat_mode_variable_takes_names_too(monkeypatch, value, mode):
    monkeypatch.setenv(nls.emulation.MODE_ENV_VAR, value)
    monkeypatch.setattr(nls.emulation, "_mode", None)   # read the environment again
    assert nls.get_device_sat_mode() == mode


@pytest.mark.parametrize("argv, message", [
    (["--sat-mode", "saturate", "s.py"],
     "argument --sat-mode: invalid choice: 'saturate' (choose from saturation, inf_nan, or their "
     "numbers 0, 1)"),
    (["--advise-loss-scale", "0", "s.py"], "argument --advise-loss-scale: must be a positive "
                                           "finite number; got '0'"),
    (["--advise-loss-scale", "inf", "s.py"], "argument --advise-loss-scale: must be a positive "
                                             "finite number; got 'inf'"),
    (["-np", "-1", "s.py"], "argument --ranks/-np: must be an int >= 1; got -1"),
])
def test_a_refused_value_names_the_option_the_value_and_what_is_accepted(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        emulate.main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(": error: " + message)


@pytest.mark.parametrize("argv, script, module, script_args", [
    (["s.py"], "s.py", None, []),
    (["--tf1", "s.py", "--tf1", "--ranks", "2", "-h"], "s.py", None,
     ["--tf1", "--ranks", "2", "-h"]),
    (["s.py", "--", "x"], "s.py", None, ["--", "x"]),        # the script's own `--` is kept
    (["--", "s.py", "--sat-mode", "1"], "s.py", None, ["--sat-mode", "1"]),
    (["--report", "r.json", "-m", "pkg.mod", "-m", "x"], None, "pkg.mod", ["-m", "x"]),
    (["-m", "--tf1", "pkg.mod"], None, "pkg.mod", []),
])
def test_everything_after_the_script_is_the_scripts(argv, script, module, script_args):
    args = emulate._parse(argv)  # pylint: disable=protected-access
    assert (args.script, args.module, args.script_args) == (script, module, script_args)


@pytest.mark.parametrize("argv, child", [
    (["--ranks", "2", "--tf1", "s.py", "--ranks", "3"], ["--tf1", "s.py", "--ranks", "3"]),
    (["--ranks=2", "s.py"], ["s.py"]),
    (["-np", "2", "--sat-mode", "inf_nan", "-m", "pkg", "-np", "4"],
     ["--sat-mode", "inf_nan", "-m", "pkg", "-np", "4"]),
])
def test_each_rank_runs_the_command_without_ranks(argv, child):
    assert emulate._without_ranks(argv) == child  # pylint: disable=protected-access


def test_each_line_a_rank_prints_starts_with_its_rank():
    sink, lock = io.StringIO(), threading.Lock()
    pump = ranks._pump  # pylint: disable=protected-access
    pump(io.StringIO("one\n{\"a\": 1}\nlast, unterminated"), sink, lock, ranks.tag(3))
    assert sink.getvalue() == "[3] one\n[3] {\"a\": 1}\n[3] last, unterminated"


# -- npu-loss-scale ------------------------------------------------------------------------------
def test_without_a_subcommand_it_prints_its_help(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: npu-loss-scale") and "report" in out


def test_report_fields(capsys, monkeypatch):
    monkeypatch.delenv(nls.BACKEND_ENV_VAR, raising=False)
    monkeypatch.setenv("NPU_LOSS_SCALE_SAT_MODE", "1")
    monkeypatch.setattr(nls.emulation, "_mode", None)   # read the environment again
    assert cli.main(["report", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report) == ["npu-loss-scale", "python", "platform", "tensorflow", "keras",
                            "backend", "sat mode", "fused kernel", "horovod", "npu_bridge",
                            "tensorflow_estimator", "environment"]
    assert report["npu-loss-scale"].startswith(nls.__version__ + " (")
    assert report["python"].startswith("%d.%d.%d " % sys.version_info[:3])
    assert report["tensorflow"] == tf.version.VERSION
    assert report["backend"] == "emulation (automatic: no real npu_bridge)"
    assert report["sat mode"] == "inf_nan (from NPU_LOSS_SCALE_SAT_MODE=1)"
    assert "NPU_LOSS_SCALE_SAT_MODE=1" in report["environment"]
    assert report["npu_bridge"].startswith("absent; npu-emulate provides")


def test_report_without_tensorflow_or_the_optional_pieces_still_reports():
    done = _python("import sys\n"
                   "for name in ('tensorflow', 'horovod', 'tensorflow_estimator'):\n"
                   "    sys.modules[name] = None\n"
                   "from npu_loss_scale.__main__ import main\n"
                   "sys.exit(main(['report']))\n")
    assert done.returncode == 0, done.stderr
    lines = {name.strip(): value for name, value in
             (line.split(" : ", 1) for line in done.stdout.splitlines())}
    assert lines["tensorflow"].startswith("absent (")
    assert lines["horovod"] == "absent" and lines["tensorflow_estimator"] == "absent"
    assert lines["npu-loss-scale"].startswith(nls.__version__)


def test_build_kernel_builds_or_finds_this_tensorflows_library(capsys):
    assert cli.main(["build-kernel"]) == 0
    path = capsys.readouterr().out.strip().split(": ", 1)[1]
    status = _kernels.status()
    assert (status["state"], status["library"]) == ("built", path) and os.path.exists(path)


# -- the kernel's build: announced, and not attempted without fcntl -------------------------------
def _fake_compiler(tmp_path, exit_code):
    """A 'compiler' that writes its -o file (or fails) at once, to see what happens around it."""
    path = tmp_path / "fake-cxx"
    lines = ["#!/bin/sh",
             "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && : > \"$2\"; shift; done"]
    if exit_code:
        lines.append("echo 'fake.cc: error: asked to fail' >&2")
    path.write_text("\n".join(lines + ["exit %d" % exit_code, ""]))
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("exit_code", [0, 1])
def test_the_kernel_build_is_logged(tmp_path, monkeypatch, caplog, exit_code):
    monkeypatch.setenv("CXX", _fake_compiler(tmp_path, exit_code))
    monkeypatch.setenv(_kernels.ENV_CACHE, str(tmp_path / "cache"))
    caplog.set_level(logging.INFO, logger="npu_loss_scale")
    if exit_code == 0:
        built = _kernels._build(tf)  # pylint: disable=protected-access
        assert os.path.exists(built)
    else:
        with pytest.raises(OSError, match="compiler exit 1: fake.cc: error: asked to fail"):
            _kernels._build(tf)  # pylint: disable=protected-access
    messages = [r.getMessage() for r in caplog.records if r.name == "npu_loss_scale"]
    assert messages[0].startswith("building the fused unscale-and-check kernel for TensorFlow %s"
                                  % tf.__version__)
    assert ("about 20 s" in messages[0]) and str(tmp_path / "cache") in messages[0]
    if exit_code == 0:
        assert messages[1].startswith("built the fused kernel in ") and built in messages[1]
    else:
        assert len(messages) == 1
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "npu_loss_scale")


def test_without_fcntl_the_two_pass_path_trains(tmp_path):
    """Where Python has no fcntl (Windows), importing the kernels' module works and ``auto``
    falls back to the two-pass path with a warning that says why."""
    done = _python(
        "import sys, warnings\n"
        "sys.modules['fcntl'] = None\n"
        "import tensorflow as tf\n"
        "import npu_loss_scale as nls\n"
        "with tf.Graph().as_default(), tf.compat.v1.Session() as sess, \\\n"
        "        warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    w = tf.compat.v1.get_variable('w', initializer=1.0)\n"
        "    opt = nls.NPULossScaleOptimizer(\n"
        "        tf.compat.v1.train.GradientDescentOptimizer(0.5), nls.FixedLossScaleManager(8))\n"
        "    train = opt.minimize(w * 3.0)\n"
        "    sess.run(tf.compat.v1.global_variables_initializer())\n"
        "    sess.run(train)\n"
        "    print(sess.run(w))\n"
        "    print([str(x.message) for x in seen if x.category is nls.FusedKernelWarning])\n",
        extra_env={_kernels.ENV_CACHE: str(tmp_path), _kernels.ENV_MODE: "auto"})
    assert done.returncode == 0, done.stderr[-3000:]
    value, warned = done.stdout.strip().splitlines()[-2:]
    assert float(value) == 1.0 - 0.5 * 3.0            # d(3w)/dw = 3, unscaled, one SGD step
    assert "no fcntl module" in warned and "two passes" in warned


# -- warnings and messages ---------------------------------------------------------------------
def test_the_warning_categories_are_exported_and_share_a_base():
    assert nls.OverflowInvisibleWarning is optimizer.OverflowInvisibleWarning
    assert nls.RanksMayDivergeWarning is agreement.RanksMayDivergeWarning
    assert nls.FusedKernelWarning is _kernels.FusedKernelWarning
    for name in ("LossScaleStuckWarning", "OverflowInvisibleWarning", "RanksMayDivergeWarning",
                 "FusedKernelWarning"):
        assert issubclass(getattr(nls, name), nls.NpuLossScaleWarning), name
        assert name in nls.__all__
    assert issubclass(nls.RanksMayDivergeWarning, RuntimeWarning)   # as before


def _warnings_of(step, steps, action):
    """The LossScaleStuckWarnings ``steps`` runs of ``step`` give with the warnings filter
    ``action`` for that category."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.filterwarnings(action, category=nls.LossScaleStuckWarning)
        for _ in range(steps):
            step()
    return [w for w in seen if w.category is nls.LossScaleStuckWarning]


@tf2_only
def test_a_warning_from_a_tf_function_comes_once_per_step_and_can_be_filtered():
    var = tf.Variable([1.0])
    opt = tf.keras.optimizers.SGD(1.0)
    scaler = nls.GradScaler(init_scale=float(np.finfo(np.float32).tiny))   # at its floor

    @tf.function
    def step():
        scaler.step(opt, [(tf.constant([np.inf]), var)])
        scaler.update()

    found = _warnings_of(step, 3, "always")
    assert len(found) == 3
    assert "GradScaler: gradients overflowed at the smallest scale" in str(found[0].message)
    assert _warnings_of(step, 2, "ignore") == []
    with pytest.raises(tf.errors.OpError, match="LossScaleStuckWarning"):
        _warnings_of(step, 1, "error")
    assert var.numpy().tolist() == [1.0]          # every step was skipped


def test_the_horovod_watchdog_firing_is_logged_as_an_error(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", type("FakeHorovod", (), {
        "shutdown": staticmethod(lambda: None)}))
    caplog.set_level(logging.INFO, logger="npu_loss_scale")
    dog = watchdog._Watchdog()  # pylint: disable=protected-access
    dog.arm(0.2)
    deadline = time.monotonic() + 10
    while dog.fired is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)   # the message follows the state change
    found = [r for r in caplog.records if r.name == "npu_loss_scale"]
    assert len(found) == 1 and found[0].levelno == logging.ERROR
    assert "more than the timeout of 0.2 s" in found[0].getMessage()


def test_after_the_command_the_logger_is_as_it_was(capsys):
    logger = logging.getLogger("npu_loss_scale")
    before = (logger.level, logger.propagate, list(logger.handlers))
    with _messages.logged_to_stderr():
        logger.info("shown")
        logger.debug("not shown")
    assert (logger.level, logger.propagate, list(logger.handlers)) == before
    assert capsys.readouterr().err == "npu_loss_scale: shown\n"
