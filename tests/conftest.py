"""Shared test set-up: quiet TensorFlow, a fresh graph per test, the emulation backend."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (CI runs it)")
    config.addinivalue_line("markers", "distributed: starts several processes")


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
    """Every test starts in saturation mode (the Atlas-training default) and restores it."""
    from npu_loss_scale import emulation
    previous = emulation.set_device_sat_mode(emulation.SATURATION)
    yield
    emulation.set_device_sat_mode(previous)
