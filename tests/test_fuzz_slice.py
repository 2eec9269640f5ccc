"""A seeded slice of the fuzz campaign (scripts/fuzz_campaign.py), and proof that it can fail.

The full campaign (10,000 steps) is one command, see docs/reliability.md; this slice runs a few
hundred steps over every front end of the stack with a fixed seed. On TensorFlow 1.15 those are
the v1 graph optimizers (in 1.15's graph mode) and GradScaler, eager, in a second process (the
campaign's ``run_elsewhere``: 1.15 turns eager execution on only at a program's start).
"""
import io
import os
import sys

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import fuzz_campaign  # noqa: E402  pylint: disable=wrong-import-position

import npu_loss_scale as nls  # noqa: E402  pylint: disable=wrong-import-position
from tf_versions import TF1, tf2_only  # noqa: E402  pylint: disable=wrong-import-position

SEED = 12
# Cases per front end (graph cases are cheap; a traced or eager case pays its tracing once).
SLICE = {"npu_graph": ([0, 1, 2], 30), "megatron": ([0, 1, 2], 30),
         "npu_function": ([0], 40), "grad_scaler": ([0], 40), "keras": ([0], 40)}
# More seeds, fewer steps each: a campaign proves what its seeds cover. CI runs this file on
# three stacks (tf215, tf221, tf115); each takes its own seeds, so they cover twelve.
MORE_SEEDS = ((1, 2, 7, 23) if tf.version.VERSION.startswith("2.15")
              else (13, 17, 19, 31) if TF1 else (3, 5, 11, 29))
# The front ends of this stack (TF 1.15: the v1 graph optimizers and GradScaler, eager).
HERE = fuzz_campaign.available_frontends()
EDGE_STEPS = 24


def _edge_cases(seed, frontend, limit=400):
    """Indices of the first case at each extreme and of the first tampered case, of
    ``frontend`` in campaign ``seed`` (drawn, not run)."""
    found = {}
    for index in range(limit):
        case = fuzz_campaign.make_case(seed, index, (frontend,), steps=EDGE_STEPS)
        kinds = ([case["extreme"]] if case["extreme"] else []) \
            + (["tamper"] if case["tamper"] else []) \
            + (["habit"] if case.get("torch_habit") else [])
        for kind in kinds:
            found.setdefault(kind, index)
    return found


def _run(frontends, steps, steps_per_case, seed=SEED, cases=None):
    out = io.StringIO()
    tally = fuzz_campaign.run_campaign(seed, steps, frontends, cases=cases,
                                       steps_per_case=steps_per_case, out=out)
    return tally, out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("frontend", HERE)
def test_a_seeded_slice_finds_no_mismatch(frontend):
    cases, per_case = SLICE[frontend]
    tally, text = _run([frontend], None, per_case, cases=cases)
    assert tally.mismatches == 0, text
    assert tally.steps == len(cases) * per_case
    assert tally.injected > 0 and tally.skipped >= 1 and tally.applied > 0, text
    assert tally.reference_checked > 0, text
    assert "mismatches 0" in text


@pytest.mark.slow
@pytest.mark.parametrize("frontend", HERE)
def test_more_seeds_find_no_mismatch(frontend):
    """The first case of each seed of MORE_SEEDS (on TF 1.15 GradScaler's in one eager process)."""
    cases, per_case = SLICE[frontend]
    steps = max(12, per_case // 3)
    tally, out = fuzz_campaign.Tally(), io.StringIO()
    fuzz_campaign.run_cases([fuzz_campaign.make_case(seed, cases[0], (frontend,), steps)
                             for seed in MORE_SEEDS], tally)
    fuzz_campaign.report(tally, MORE_SEEDS[0], out)
    assert tally.mismatches == 0, out.getvalue()
    assert tally.cases == len(MORE_SEEDS) and tally.steps == len(MORE_SEEDS) * steps, \
        out.getvalue()
    assert tally.reference_checked + tally.skipped > 0, out.getvalue()


@pytest.mark.parametrize("frontend", HERE)
@pytest.mark.slow
def test_cases_at_the_edges_and_tampered_restores_find_no_mismatch(frontend):
    """Each extreme the front end's rule can reach, a tampered checkpoint and (GradScaler)
    torch's habit, a few steps each."""
    found = _edge_cases(SEED, frontend)
    assert "tamper" in found and "ceiling" in found, found
    tally = fuzz_campaign.Tally()
    out = io.StringIO()
    cases = []
    for kind, index in sorted(found.items()):
        case = fuzz_campaign.make_case(SEED, index, (frontend,), steps=EDGE_STEPS)
        if kind != "tamper":
            case["tamper"] = None
        if kind != "habit":
            case["torch_habit"] = None
        cases.append(case)
    fuzz_campaign.run_cases(cases, tally)
    fuzz_campaign.report(tally, SEED, out)
    assert tally.mismatches == 0, out.getvalue()
    assert tally.tampered == 1, out.getvalue()
    assert tally.habits == (1 if frontend == "grad_scaler" else 0), out.getvalue()


def test_a_front_end_the_stack_lacks_is_refused_naming_it_and_why(capsys):
    name = "keras" if TF1 else "no_such_front_end"
    with pytest.raises(SystemExit):
        fuzz_campaign.main(["--frontends", name, "--steps", "1"])
    err = capsys.readouterr().err
    assert "--frontends" in err and repr(name) in err, err
    assert "accepted" in err and ", ".join(HERE) in err, err
    if TF1:
        assert "needs TensorFlow 2's Keras" in err, err


def test_cases_are_reproducible_from_seed_and_index():
    assert fuzz_campaign.make_case(7, 3) == fuzz_campaign.make_case(7, 3)
    assert fuzz_campaign.make_case(7, 3) != fuzz_campaign.make_case(7, 4)
    case = fuzz_campaign.make_case(7, 3)
    first, second = fuzz_campaign.make_schedule(case), fuzz_campaign.make_schedule(case)
    assert [s["injected"] for s in first] == [s["injected"] for s in second]


@pytest.mark.slow
def test_the_campaign_reports_an_optimizer_that_applies_overflowed_steps(monkeypatch):
    original = nls.NPULossScaleOptimizer._read_and_agree  # pylint: disable=protected-access

    def everything_finite(self, *args, **kwargs):
        status, end_ops = original(self, *args, **kwargs)
        return tf.zeros_like(status), end_ops

    monkeypatch.setattr(nls.NPULossScaleOptimizer, "_read_and_agree", everything_finite)
    tally, text = _run(["npu_graph"], None, 40, cases=[0])
    assert tally.injected > 0
    assert tally.mismatches > 0, text
    assert "step applied but expected skipped" in text
    assert '"frontend": "npu_graph"' in text           # the failing case's parameters


@pytest.mark.slow
def test_the_campaign_reports_a_scale_rule_that_drifts_from_the_twin(monkeypatch):
    original = nls.ExponentialUpdateLossScaleManager.update_loss_scale

    def never_decreases(self, finite_grads):  # pylint: disable=unused-argument
        return original(self, tf.constant(True))

    monkeypatch.setattr(nls.ExponentialUpdateLossScaleManager, "update_loss_scale",
                        never_decreases)
    case = fuzz_campaign.make_case(SEED, 0, ("npu_graph",), steps=30)
    case.update(rule={"name": "exponential", "init": 1024.0, "incr_every": 50,
                      "decr_every": 1, "incr_ratio": 2.0, "decr_ratio": 0.5},
                overflow_rate=0.3)
    tally = fuzz_campaign.Tally()
    fuzz_campaign.run_case(case, tally)
    assert tally.injected > 0
    assert tally.mismatches > 0
    assert any("the twin has" in f["what"] for f in tally.failures)


def test_the_keras_twin_keeps_a_finite_scale_where_doubling_gives_inf():
    twin = fuzz_campaign.KerasTwin(2.0 ** 126, 1)
    twin.step(False)
    assert twin.state() == {"loss_scale": 2.0 ** 127}
    twin.step(False)
    assert twin.state() == {"loss_scale": 2.0 ** 127}
    twin.step(True)
    assert twin.state() == {"loss_scale": 2.0 ** 126}


@tf2_only
@pytest.mark.slow
def test_a_keras_case_that_reaches_float32s_ceiling_matches_its_twin():
    """Seed 7, case 8 (growth every step, bfloat16): the scale reaches 2**127 by step 143 and
    must stay there, in the package and in the twin, with every step decided alike."""
    case = fuzz_campaign.make_case(7, 8, fuzz_campaign.FRONTENDS)
    assert case["frontend"] == "keras" and case["rule"]["growth_steps"] == 1
    case["steps"] = 150
    tally = fuzz_campaign.Tally()
    runner = fuzz_campaign.run_case(case, tally)
    assert tally.mismatches == 0, tally.failures[:3]
    assert float(runner.opt.loss_scale.numpy()) == 2.0 ** 127
