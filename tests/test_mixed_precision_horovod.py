"""MegatronMixedPrecisionOptimizer over Horovod (2 processes, Gloo on loopback).

The norm, zero count and clipping see the averaged gradients every rank applies; an overflow
seen by one rank only (a saturated fp16 activation) makes both skip, with NaN norms on both.
"""
import json
import os

import numpy as np
import pytest

from dist_workers import harness


pytestmark = harness.horovod_pytestmark()

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_workers",
                      "megatron_worker.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("megatron_horovod")
    result = harness.run_example_with_horovodrun(out, WORKER, script_args=[str(out)],
                                                 deadline=180)
    assert result.returncodes == [0], result.tail()
    loaded = []
    for rank in range(2):
        with open(os.path.join(str(out), "rank%d.json" % rank)) as f:
            loaded.append(json.load(f))
    return loaded


def test_every_rank_reports_the_norm_of_the_averaged_gradients_and_applies_the_same_update(
        ranks):
    r0, r1 = ranks
    assert [s["finite"] for s in r0] == [s["finite"] for s in r1] == [True, True, False, True,
                                                                      True]
    for s0, s1 in zip(r0, r1):
        assert s0["grad_norm"] == s1["grad_norm"] or (np.isnan(s0["grad_norm"])
                                                      and np.isnan(s1["grad_norm"]))
        assert s0["num_zeros"] == s1["num_zeros"]
        assert s0["w"] == s1["w"]
        if s0["finite"]:
            for s in (s0, s1):
                assert s["grad_norm"] == pytest.approx(s["expected_norm"], rel=1e-5)
                # clip_grad=0.05, SGD lr 0.5: the update is 0.5 * min(norm, 0.05)
                assert s["update_norm"] == pytest.approx(0.5 * min(s["grad_norm"], 0.05),
                                                         rel=1e-3)
        else:
            assert np.isnan(s0["grad_norm"]) and s0["num_zeros"] == -1 == s1["num_zeros"]
            assert s0["update_norm"] == 0.0 == s1["update_norm"]
