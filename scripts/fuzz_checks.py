"""The fuzz campaign's checks: the NumPy reference of the gradients and updates, the tally, and
the comparison of one step's outcome with what it must be (scripts/fuzz_campaign.py)."""
import json

import numpy as np
import tensorflow as tf

from fuzz_cases import KINDS
from fuzz_twins import DTYPE_MAX, F32, F32_MAX, F32_TINY, round_to

# ---------------------------------------------------------------------------------------------
# NumPy reference of the gradients and updates
# ---------------------------------------------------------------------------------------------
def natural_overflow(case, scale, feeds=()):
    """Does a clean step overflow at ``scale``? True, False or None (too close to call).

    The loss is linear, so every scaled gradient is round(scale) * round(coefficient) with
    |coefficient| <= 1 and one coefficient of magnitude 1: the largest is the scale itself.
    The inf/NaN read pass sums each scaled gradient tensor in float32: a tensor whose scaled
    gradients could sum beyond float32 max (scales near 2**127) may count as overflowed, so such
    steps are too close to call as well.
    """
    limit = DTYPE_MAX[case["dtype"]]
    if scale > limit * 1.01:
        return True
    l1 = 0.0
    for feed in feeds:
        for a in feed["a"]:
            l1 = max(l1, float(np.sum(np.abs(a), dtype=np.float64)))
        if "sa" in feed:
            l1 = max(l1, float(np.sum(np.abs(feed["sa"]), dtype=np.float64)))
    if scale < limit * 0.99 and scale * l1 < F32_MAX * 0.99:
        return False
    return None


def unscale_factors(scale):
    """The float32 factors the gradients are multiplied by, in order: 1/scale, or, above 2**126
    (where 1/scale is subnormal and a CPU flushes it to zero), 2**-64 and then 2**64/scale."""
    if F32(scale) > F32(2.0 ** 126):
        return (F32(2.0 ** -64), F32(F32(2.0 ** 64) / F32(scale)))
    return (F32(1.0) / F32(scale),)


def scaled_product(dt, s, a, flush=True):
    """The scaled gradient ``s * a`` as TensorFlow's CPU kernels compute it in ``dt``.

    A bfloat16 or float32 product is computed in float32, and a float32 result below float32's
    smallest normal number is flushed to zero when the kernels run with flush-to-zero
    (``flush``, see ``kernels_flush_subnormals``): at a scale near 2**-126 small gradients
    vanish. float16 products round to float16, whose subnormals are kept.
    """
    with np.errstate(under="ignore"):
        product = (s * round_to(dt, a)).astype(np.float32)
    if flush and dt in ("bfloat16", "float32"):
        product = np.where(np.abs(product) < F32_TINY, np.copysign(F32(0.0), product), product)
    return round_to(dt, product)


_FLUSHES = {}


def kernels_flush_subnormals():
    """Do the CPU kernels of the current execution mode flush a float32 result below 2**-126 to
    zero? Measured once per mode: TF 2's kernels (eager and graph) and TF 1.15's graph executor
    do; TF 1.15's eager kernels keep the subnormal."""
    eager = tf.executing_eagerly()
    if eager not in _FLUSHES:
        tiny, half = np.float32(2.0 ** -126), np.float32(0.5)
        if eager:
            result = (tf.constant(tiny) * tf.constant(half)).numpy()
        else:
            with tf.Graph().as_default():
                x = tf.compat.v1.placeholder(tf.float32, [])
                product = x * half
                with tf.compat.v1.Session() as sess:
                    result = sess.run(product, {x: tiny})
        _FLUSHES[eager] = float(result) == 0.0
    return _FLUSHES[eager]


def unscaled_grads(case, feed, scale, factors, flush=True):
    """Per variable: dense float32 gradient (the embedding's as (indices, values) too);
    ``flush``: the kernels flush subnormal products to zero (``scaled_product``)."""
    dt = case["dtype"]
    s = round_to(dt, F32(scale))

    def unscale(g):
        for factor in factors:
            g = (g * factor).astype(np.float32)
        return g

    grads = []
    for a in feed["a"]:
        grads.append(unscale(scaled_product(dt, s, a, flush)))
    sparse = None
    if case["sparse"]:
        sparse = (feed["idx"], unscale(scaled_product(dt, s, feed["sa"], flush)))
    return grads, sparse


def densify(case, sparse):
    rows, width, _ = case["sparse"]
    out = np.zeros([rows, width], np.float32)
    np.add.at(out, sparse[0], sparse[1])
    return out


def clip_factor(case, grads, sparse):
    total = sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads)
    if sparse is not None:
        total += float(np.sum(np.square(sparse[1], dtype=np.float64)))
    norm = np.sqrt(total)
    return case["clip"] / max(norm, case["clip"])


class Reference:
    """The update an applied step must make, from the values read before it."""

    def __init__(self, case):
        self.case = case

    def expected(self, before, grads, sparse_rows, t):
        """``before``: {name: array} of variables and slots; ``grads``: {var name: dense grad}.
        ``sparse_rows``: {var name: touched row mask} for sparse applies (else absent); ``t``:
        the applied steps so far, this one included. Slots not created yet are zeros."""
        case, out = self.case, {}
        lr = F32(case["lr"])
        for name, g in grads.items():
            v = before[name]
            if case["optimizer"] == "sgd":
                out[name] = (v - lr * g).astype(np.float32)
            elif case["optimizer"] == "momentum":
                acc = before.get(name + "/momentum", np.zeros_like(v))
                new_acc = (acc * F32(case["momentum"]) + g).astype(np.float32)
                new_v = (v - lr * new_acc).astype(np.float32)
                mask = sparse_rows.get(name)
                if mask is not None:
                    new_acc = np.where(mask[:, None], new_acc, acc)
                    new_v = np.where(mask[:, None], new_v, v)
                out[name + "/momentum"], out[name] = new_acc, new_v
            elif case["optimizer"] == "adam":
                b1, b2, eps = F32(0.9), F32(0.999), F32(1e-8)
                m = before.get(name + "/m", np.zeros_like(v))
                s = before.get(name + "/v", np.zeros_like(v))
                b1p, b2p = F32(b1 ** t), F32(b2 ** t)
                lr_t = lr * np.sqrt(F32(1) - b2p) / (F32(1) - b1p)
                m = (m + (g - m) * (F32(1) - b1)).astype(np.float32)
                s = (s + (g * g - s) * (F32(1) - b2)).astype(np.float32)
                out[name + "/m"], out[name + "/v"] = m, s
                out[name] = (v - lr_t * m / (np.sqrt(s) + eps)).astype(np.float32)
        return out


# ---------------------------------------------------------------------------------------------
# Checking one step
# ---------------------------------------------------------------------------------------------
class Tally:
    def __init__(self):
        self.steps = self.micro_batches = self.injected = self.skipped = self.applied = 0
        self.natural = self.ambiguous = self.reference_checked = self.cases = 0
        self.tampered = self.habits = 0
        self.seconds = 0.0
        self.mismatches = 0
        self.failures = []
        self.by_frontend = {}
        self.by_kind = {k: 0 for k in KINDS}
        self.extremes = {}

    def fail(self, case, step, what):
        self.mismatches += 1
        if len(self.failures) < 20:
            self.failures.append({"case": case, "step": step, "what": what})

    COUNTS = ("cases", "steps", "micro_batches", "injected", "skipped", "applied", "natural",
              "ambiguous", "reference_checked", "tampered", "habits", "mismatches")

    def as_dict(self):
        return {k: getattr(self, k) for k in self.COUNTS}

    def to_json(self):
        """Everything a tally holds, for another process's tally to add (``add``)."""
        return json.dumps(dict(self.as_dict(), failures=self.failures, by_kind=self.by_kind,
                               by_frontend=self.by_frontend, extremes=self.extremes))

    def add(self, other):
        """Adds the counts of ``other`` (a dict from ``to_json``) to this tally."""
        for key in self.COUNTS:
            setattr(self, key, getattr(self, key) + other[key])
        self.failures = (self.failures + other["failures"])[:20]
        for mine, theirs in ((self.by_kind, other["by_kind"]),
                             (self.extremes, other["extremes"])):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count
        for name, counts in other["by_frontend"].items():
            fe = self.by_frontend.setdefault(name, dict.fromkeys(counts, 0))
            for key, count in counts.items():
                fe[key] += count


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _close(actual, expected):
    return np.allclose(actual, expected, rtol=2e-5, atol=1e-6, equal_nan=False)


def check_step(tally, case, step, before, after, applied, expect_apply, ref_after, counters,
               twin_state, scale_state):
    """Compares one step's outcome with what it must be; counts mismatches.

    ``before``/``after``: {name: array} of every guarded value (model variables, slots,
    optimizer counters, global_step...), read before and after the step."""
    if expect_apply is not None and applied != expect_apply:
        tally.fail(case, step, "step %s but expected %s" % (
            "applied" if applied else "skipped", "applied" if expect_apply else "skipped"))
    for name, value in after.items():
        if np.asarray(value).dtype.kind == "f" and not np.all(np.isfinite(value)):
            tally.fail(case, step, "%s is not finite after the step" % name)
    if not applied:
        for name in before:
            if name in after and not same_bits(before[name], after[name]):
                tally.fail(case, step, "%s changed on a step that was not applied" % name)
    elif isinstance(ref_after, str):
        pass
    elif ref_after is not None:
        tally.reference_checked += 1
        for name in ref_after:
            if not _close(after[name], ref_after[name]):
                tally.fail(case, step, "%s differs from the NumPy update: max |diff| %g" % (
                    name, float(np.max(np.abs(after[name] - ref_after[name])))))
    else:
        model = [n for n in after if n in before and n.startswith(("d", "emb")) and "/" not in n]
        if all(same_bits(before[n], after[n]) for n in model):
            tally.fail(case, step, "an applied step changed no variable")
    for name, (got, want) in counters.items():
        if int(got) != int(want):
            tally.fail(case, step, "counter %s is %s, expected %s" % (name, got, want))
    for key, want in twin_state.items():
        got = scale_state.get(key)
        if got is None or float(got) != float(want):
            tally.fail(case, step, "scale state %s is %r, the twin has %r" % (key, got, want))
