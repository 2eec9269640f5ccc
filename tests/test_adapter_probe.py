"""The layers below the Ascend layer reach Huawei's adapter (npu_bridge) only through the probe
(_internal/probe.py); where the emulator's shim stands in for the adapter, the layer that
installed it hands the probe the way to its modules. Agreement 'hccl' keeps working over the
shim at one rank (the device's identity all-reduce)."""
import sys

import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale._internal import probe
from npu_loss_scale.agreement.hccl import HcclAgreement, hccl_ready
from npu_loss_scale.ascend import shim


def test_installing_the_shim_hands_the_probe_its_importer_and_uninstalling_takes_it_back(
        npu_shim):
    assert probe._stand_in["import"] is shim._import_shim_module  # pylint: disable=protected-access
    ops = probe.npu_bridge_hccl_ops()
    assert ops is sys.modules["npu_bridge.hccl.hccl_ops"]
    assert probe.is_shim(sys.modules["npu_bridge"])
    shim.uninstall_shim()
    assert probe._stand_in["import"] is None  # pylint: disable=protected-access
    shim.install_shim()  # for the fixture's own teardown


def test_the_probe_goes_through_the_importer_it_was_handed(monkeypatch):
    asked = []
    module = object()

    def importer(name):
        asked.append(name)
        return module

    monkeypatch.setitem(probe._stand_in, "import", importer)  # pylint: disable=protected-access
    assert probe.npu_bridge_hccl_ops() is module
    assert probe.npu_plugin_module() is module
    assert asked == ["npu_bridge.hccl.hccl_ops", "npu_bridge.estimator.npu.npu_plugin"]


def test_hccl_agreement_over_the_shim_is_the_identity_at_one_rank(npu_shim):
    with tf.Graph().as_default():
        status = tf.constant([0.0, 3.0, 0.0])
        reduced = HcclAgreement().reduce(status)
        with tf.compat.v1.Session() as sess:
            np.testing.assert_array_equal(sess.run(reduced), [0.0, 3.0, 0.0])
    assert hccl_ready("npu") and not hccl_ready("emulation")


def test_without_npu_bridge_hccl_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "npu_bridge", None)  # import npu_bridge fails
    monkeypatch.delitem(sys.modules, "npu_bridge.hccl.hccl_ops", raising=False)
    with pytest.raises(ImportError, match="agreement 'hccl' needs npu_bridge.hccl.hccl_ops"):
        HcclAgreement()
    assert not hccl_ready("npu")
