"""pytest plugin: test Ascend training code on CPU with an emulated NPU.

Installing ``npu-loss-scale`` registers this module with pytest (entry point ``pytest11``,
name ``npu_loss_scale``); nothing has to be imported or listed in a ``conftest.py``. Loading it
costs nothing for tests that do not use it: TensorFlow and the package's modules are imported by
the fixtures and helpers when they run, and no fixture is ``autouse``.

Fixtures:

``npu_device``
    An emulated Ascend device for one test (:class:`NPUDevice`): the emulated float-status
    register starts empty, the overflow mode is saturation (the Atlas-training default) or the
    one asked for, the ``emulation`` detection backend is selected, and on request every float16
    op is saturated or a ``precision_mode`` is applied (to the sessions and the TF2 ops of the
    test). All of it is undone when the test ends. Choose per test with the marker::

        @pytest.mark.npu_device(sat_mode="inf_nan", saturate_every_op=True)

    or parametrise (``@pytest.mark.parametrize("npu_device", ["saturation", "inf_nan"],
    indirect=True)``), or change it inside the test (``npu_device.sat_mode = "inf_nan"``).
    ``npu_device.run_script(path, *args)`` runs an unmodified Ascend script (``from
    npu_bridge.npu_init import *``) in the test's process; ``npu_device.load_script(path)``
    imports one as a module so the test can call its functions.

``npu_doctor``
    Runs ``npu-loss-scale doctor`` on a script (``npu_doctor.run("train.py", *args,
    steps=10)``) in the test's ``tmp_path`` and returns its report; see
    :mod:`npu_loss_scale.pytest_plugin.doctor`.

``npu_ranks``
    Runs a function or a script in N emulated ranks: N processes with the environment Ascend
    launch scripts set (``RANK_ID``, ``RANK_SIZE``, ``DEVICE_ID``, ...) whose HCCL calls and
    distributed loss-scale agreement work across the processes, as with ``python -m
    npu_loss_scale.emulate --ranks N``. Returns each rank's exit code, output and (for a
    function) return value; a rank that fails or outlives the timeout fails the test with an
    error naming it. See :class:`NPURanks`.

Assertion helpers (import them: ``from npu_loss_scale.pytest_plugin import ...``):

:func:`assert_step_skipped`, :func:`assert_no_overflow`
    Take one training step's outcome as each front end reports it — the dict of
    ``sess.run(opt.step_report)`` (NPULossScaleOptimizer, fetched with the train op), a
    :class:`~npu_loss_scale.LossScaleHook` (its last step) or one record of its ``history``, the
    Keras ``NpuLossScaleOptimizer`` after a step, a :class:`~npu_loss_scale.GradScaler` after
    ``step()`` and before ``update()``, or a localisation ``StepOverflowRecord``.
:func:`overflow_sites`
    The overflow sites (op, direction, dtype, ...) of the last step, from
    :mod:`npu_loss_scale.device.localisation`.
:func:`assert_no_harmful_overflow`
    Takes the overflow doctor's report (the ``npu_doctor`` fixture's ``run(script, ...)``, or
    :func:`run_doctor`) and fails naming each harmful overflow site, its verdict and its fix.
:func:`assert_resume_matches`
    Runs the user's ``train(model_dir, until)`` straight through and stopped-then-restarted from
    its checkpoint, and fails at the first step whose loss scale, verdict or counters differ:
    the loss-scale state did not survive the checkpoint.

Example (a test of an Ascend script ``train.py`` whose ``main(steps)`` returns the per-step
``opt.step_report`` values)::

    from npu_loss_scale.pytest_plugin import assert_no_overflow, assert_step_skipped

    def test_the_scale_backs_off_then_training_proceeds(npu_device):
        train = npu_device.load_script("train.py")
        steps = train.main(steps=4)
        assert_step_skipped(steps[0])
        assert_no_overflow(steps[-1])
"""
import importlib

import pytest

_MARKER = "npu_device"

# public name -> the file of the plugin defining it (imported on first use: loading the plugin
# imports no other module of the package, and no TensorFlow; no __dir__ lists them, since pytest
# reads every attribute dir() names when it registers a plugin)
_NAMES = {"NPUDevice": "device", "SAT_MODES": "device",
          "NPURanks": "ranks", "RankFailed": "ranks", "RanksResult": "ranks",
          "assert_no_overflow": "assertions", "assert_step_skipped": "assertions",
          "overflow_sites": "assertions", "assert_resume_matches": "resume",
          "PER_PROCESS_KEYS": "resume", "Doctor": "doctor", "run_doctor": "doctor",
          "assert_no_harmful_overflow": "doctor"}


def __getattr__(name):
    if name in _NAMES:
        value = getattr(importlib.import_module("%s.%s" % (__name__, _NAMES[name])), name)
        globals()[name] = value
        return value
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "npu_device(sat_mode='saturation', saturate_every_op=False, "
                   "precision_mode=None): how the npu_device fixture sets up the emulated "
                   "Ascend device for this test (npu_loss_scale plugin)")


@pytest.fixture
def npu_device(request):
    """An emulated Ascend device for this test (see :class:`NPUDevice`)."""
    options = {}
    marker = request.node.get_closest_marker(_MARKER)
    if marker is not None:
        if marker.args:
            raise TypeError("@pytest.mark.npu_device takes keyword arguments only (sat_mode=, "
                            "saturate_every_op=, precision_mode=); got %r" % (marker.args,))
        unknown = set(marker.kwargs) - {"sat_mode", "saturate_every_op", "precision_mode"}
        if unknown:
            raise TypeError("@pytest.mark.npu_device: unknown argument(s) %s; accepted: "
                            "sat_mode, saturate_every_op, precision_mode" % sorted(unknown))
        options.update(marker.kwargs)
    param = getattr(request, "param", None)
    if param is not None:   # parametrize("npu_device", [...], indirect=True)
        if isinstance(param, dict):
            options.update(param)
        else:
            options["sat_mode"] = param
    from npu_loss_scale.pytest_plugin.device import NPUDevice  # pylint: disable=import-outside-toplevel
    device = NPUDevice(**options)
    try:
        yield device
    finally:
        device.close()


@pytest.fixture
def npu_ranks(tmp_path):
    """Runs a function or a script in N emulated ranks (see :class:`NPURanks`)."""
    from npu_loss_scale.pytest_plugin.ranks import NPURanks  # pylint: disable=import-outside-toplevel
    return NPURanks(str(tmp_path))


@pytest.fixture
def npu_doctor(tmp_path):
    """Runs ``npu-loss-scale doctor`` on a script and returns its report (see
    :class:`~npu_loss_scale.pytest_plugin.doctor.Doctor`)."""
    from npu_loss_scale.pytest_plugin.doctor import Doctor  # pylint: disable=import-outside-toplevel
    return Doctor(tmp_path)


# The fixtures (npu_device, npu_ranks, npu_doctor) and hooks reach tests through the plugin's registration,
# not through imports.
__all__ = ["NPUDevice", "NPURanks", "RankFailed", "RanksResult", "assert_no_overflow",
           "Doctor", "run_doctor", "assert_no_harmful_overflow",
           "assert_resume_matches", "assert_step_skipped", "overflow_sites", "PER_PROCESS_KEYS",
           "SAT_MODES"]
