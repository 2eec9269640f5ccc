"""Shared test set-up: quiet TensorFlow, a fresh graph per test, the emulation backend."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import skip_policy  # noqa: E402  (tests/skip_policy.py: the CI stacks' skip allowlists)
import docs_summary  # noqa: E402  (tests/docs_summary.py: the documentation blocks skipped)


def pytest_configure(config):
    # The markers (slow, distributed, bert, tf_independent) are declared in pyproject.toml.
    skip_policy.pytest_configure(config)
    docs_summary.pytest_configure(config)
    # The package's pytest plugin (npu_device, npu_ranks) is loaded by pytest through its
    # pytest11 entry point once the package is installed (scripts/setup_env.sh). A checkout run
    # with an installation that predates the entry point gets it here; then
    # test_pytest_plugin.py::test_plugin_is_loaded_through_its_entry_point fails and says so.
    if not config.pluginmanager.has_plugin("npu_loss_scale"):
        from npu_loss_scale import pytest_plugin  # pylint: disable=import-outside-toplevel
        config.pluginmanager.register(pytest_plugin, "npu_loss_scale")


def _drop_modules(*tops):
    import sys  # pylint: disable=import-outside-toplevel
    for name in list(sys.modules):
        if name.split(".", 1)[0] in tops:
            del sys.modules[name]


@pytest.fixture
def npu_shim(monkeypatch):
    """The emulate runner's npu_bridge/hccl/npu_device/moxing shim on sys.path for one test (a
    one-rank environment), removed afterwards with the session and loop hooks it may install."""
    from npu_loss_scale.cli import emulate  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.ascend import loops
    from npu_loss_scale.device import precision  # pylint: disable=import-outside-toplevel
    monkeypatch.delenv("RANK_SIZE", raising=False)
    monkeypatch.delenv("RANK_ID", raising=False)
    _drop_modules("npu_bridge", "hccl", "npu_device", "moxing")
    assert emulate.install_shim()
    yield
    emulate.uninstall_shim()
    _drop_modules("npu_bridge", "hccl", "npu_device", "moxing")
    precision.uninstall_session_hook()
    precision.uninstall_op_precision()
    precision.set_default_precision_mode(None)
    from npu_loss_scale.device import (  # pylint: disable=import-outside-toplevel
        register as emulation)
    emulation.npu_clear_float_status_v2()   # an overflow a test left in the register
    loops.uninstall_run_hook()


@pytest.fixture
def graph():
    """A fresh tf.Graph made default for the test."""
    g = tf.Graph()
    with g.as_default():
        yield g


@pytest.fixture
def session(graph):
    with tf.compat.v1.Session(graph=graph) as sess:
        yield sess


@pytest.fixture(autouse=True)
def _default_sat_mode():
    """Every test starts in saturation mode (the Atlas-training default) and restores it, and
    (in eager mode) with the emulated register's overflow cleared: an overflow an earlier test
    left there would otherwise be read by the next one, so a test's outcome would depend on the
    order the tests run in (pytest-xdist gives each worker its own order).

    Tests that need more of the emulated device (a fresh eager register, INF/NaN mode, every
    float16 op saturated, a precision mode) take the plugin's ``npu_device`` fixture.
    """
    from npu_loss_scale.device import register as emulation
    if tf.executing_eagerly():
        emulation.npu_clear_float_status_v2()
    previous = emulation.set_device_sat_mode(emulation.SATURATION)
    yield
    emulation.set_device_sat_mode(previous)
