"""Assertions shared by the distributed tests, on the records train_worker.py writes."""
from npu_loss_scale.scaling.reference.ascend import ExponentialUpdateRule

STEPS = 8
OVERFLOW_STEPS = (2, 5)
STATE_KEYS = ("loss_scale", "good_steps", "bad_steps", "skipped_steps", "global_step", "w", "b")


def expected_manager_history(finite_flags):
    """(loss_scale, good_steps, bad_steps) after each step, from the pure-Python reference."""
    rule = ExponentialUpdateRule(init_loss_scale=1024, incr_every_n_steps=3,
                                 decr_every_n_nan_or_inf=1, decr_ratio=0.5)
    out = []
    for finite in finite_flags:
        rule.update(finite)
        out.append((float(rule.loss_scale), rule.good_steps, rule.bad_steps))
    return out


def steps_of(rank_results, config):
    records = rank_results[config]["steps"]
    assert [r["step"] for r in records] == list(range(STEPS)), records
    return records


def assert_identical_after_every_step(ranks, config):
    """Loss scale, counters, global_step and variables are bit-identical on all ranks."""
    per_rank = [steps_of(r, config) for r in ranks]
    for step in range(STEPS):
        first = per_rank[0][step]
        for rank, records in enumerate(per_rank[1:], start=1):
            for key in ("finite",) + STATE_KEYS:
                assert records[step][key] == first[key], (
                    "config %r, step %d: %s differs between rank 0 (%r) and rank %d (%r)"
                    % (config, step, key, first[key], rank, records[step][key]))


def assert_skipped_exactly(records, overflow_steps=OVERFLOW_STEPS, config=""):
    """The rank skipped exactly ``overflow_steps``: flags, counters, scale and variables."""
    finite = [r["finite"] for r in records]
    assert finite == [s not in overflow_steps for s in range(STEPS)], (config, finite)
    history = expected_manager_history(finite)
    applied = 0
    previous_w = None
    for step, rec in enumerate(records):
        if finite[step]:
            applied += 1
        assert rec["global_step"] == applied, (config, step, rec)
        assert rec["skipped_steps"] == step + 1 - applied, (config, step, rec)
        assert (rec["loss_scale"], rec["good_steps"], rec["bad_steps"]) == history[step], (
            config, step, rec, history[step])
        if previous_w is not None:
            if finite[step]:
                assert rec["w"] != previous_w, ("an applied step must move the weights",
                                                config, step)
            else:
                assert rec["w"] == previous_w, ("a skipped step must not move the weights",
                                                config, step)
        previous_w = rec["w"]


def assert_diverged(ranks, config, overflow_rank=1, overflow_steps=OVERFLOW_STEPS, strict=True):
    """Without agreement: the overflowing rank skips alone and the ranks' state drifts apart.

    Up to the first overflow step the other ranks apply every step; at that step only
    ``overflow_rank`` skips, and from then on ``global_step``, loss scale and weights differ.
    ``strict``: the other ranks never overflow at all (true when no gradients are averaged -
    with averaging, rank 0 applies rank 1's huge gradients and later overflows itself).
    """
    records = [steps_of(r, config) for r in ranks]
    first = min(overflow_steps)
    for rank, recs in enumerate(records):
        finite = [r["finite"] for r in recs]
        horizon = STEPS if strict else first + 1
        if rank == overflow_rank:
            assert finite[:horizon] == [s not in overflow_steps for s in range(horizon)], (
                config, rank, finite)
        else:
            assert all(finite[:horizon]), (
                "rank %d never overflowed itself and, without agreement, never hears of rank "
                "%d's overflow" % (rank, overflow_rank), config, finite)
    a, b = records[0][first], records[overflow_rank][first]
    for key in ("global_step", "loss_scale", "w"):
        assert a[key] != b[key], ("config %r: after step %d, %s should differ between rank 0 "
                                  "and rank %d without agreement" % (config, first, key,
                                                                     overflow_rank))
    for step in range(first, STEPS):
        assert records[0][step]["w"] != records[overflow_rank][step]["w"], (config, step)
    if strict:
        assert records[0][-1]["global_step"] == STEPS
        assert records[overflow_rank][-1]["global_step"] == STEPS - len(overflow_steps)
