"""The TF2 front ends agree over Horovod (Gloo, loopback) with real processes: only rank 1
overflows (a saturated overflow its register alone sees), and with is_distributed=True every
rank skips that step; with is_distributed=False the ranks diverge."""
import json
import os

import pytest

from dist_workers import harness

HERE = os.path.dirname(os.path.abspath(__file__))


pytestmark = harness.horovod_pytestmark()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("frontends")
    result = harness.run_example_with_horovodrun(
        out, os.path.join(HERE, "dist_workers", "frontends_worker.py"),
        script_args=[str(out)], deadline=240)
    result.completed_ranks(2, [0])
    results = []
    for rank in range(2):
        with open(os.path.join(str(out), "rank%d.json" % rank)) as f:
            results.append(json.load(f))
    return results


@pytest.mark.parametrize("front_end", ["scaler", "keras"])
def test_with_agreement_every_rank_skips_the_step_rank1_overflowed(ranks, front_end):  # pylint: disable=redefined-outer-name
    r0, r1 = (r[front_end + "_agree"] for r in ranks)
    assert r0 == r1                                   # identical after every step
    assert [s["scale"] for s in r0] == [16.0, 8.0, 8.0, 8.0]
    assert r0[0]["weights"] != [0.5, 0.25]            # step 0 applied
    assert r0[1]["weights"] == r0[0]["weights"]       # step 1 skipped on both ranks
    assert r0[2]["weights"] != r0[1]["weights"]       # step 2 applied again
    if front_end == "keras":
        assert [s["finite"] for s in r0] == [True, False, True, True]


@pytest.mark.parametrize("front_end", ["scaler", "keras"])
def test_without_agreement_the_ranks_diverge(ranks, front_end):  # pylint: disable=redefined-outer-name
    r0, r1 = (r[front_end + "_alone"] for r in ranks)
    assert [s["scale"] for s in r0] == [16.0, 16.0, 16.0, 16.0]
    assert [s["scale"] for s in r1] == [16.0, 8.0, 8.0, 8.0]
    assert r0[-1]["weights"] != r1[-1]["weights"]
