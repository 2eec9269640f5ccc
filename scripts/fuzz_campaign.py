"""Seeded fuzz campaign: no overflowed update ever reaches a variable, the scale state stays exact.

Every case is drawn from ``(seed, case index)`` alone: a front end (``NPULossScaleOptimizer`` in a
v1 graph or a ``tf.function``, with or without gradient accumulation; the Megatron
mixed-precision optimizer with a Megatron scaler; the torch-style ``GradScaler``; the Keras
``NpuLossScaleOptimizer``), a small random model (dense variables and, where the front end takes
them, an embedding with sparse gradients), a compute dtype (float16, bfloat16, float32), an
inner optimizer (SGD, Momentum, Adam, AdamW-style decay through ``ParamGroupOptimizer`` and
``OptimizerParamScheduler``), optional global-norm clipping, a loss-scale rule and its
parameters. Each case builds its graph or function once and runs many steps; at random steps,
tensors and micro-batches it injects an overflow of a random kind:

* ``inf`` / ``nan``: a coefficient of one variable's term becomes inf / NaN (the gradient
  overflows);
* ``saturated``: a term's forward value overflows and saturation turns it into ±MAX of the
  compute dtype (±65504 for float16): every value stays finite, only the register knows;
* ``register``: the emulated float-status register is set and no value is touched;
* ``cond``: a forward-only overflow (saturated) inside a ``tf.cond`` branch.

The model's loss is linear in every variable, so the scaled gradient of each step is known in
closed form: a step is expected to overflow when an overflow was injected into it (or into any
micro-batch of its accumulation group) or when the scale itself is beyond the compute dtype's
range; steps within 1 % of that bound are "ambiguous" (the twin then follows the observed
decision, and they are counted).

After every step it checks: a skipped step (and a micro-batch that does not complete an
accumulation group) left every model variable, optimizer slot, optimizer counter and
``global_step`` / iteration counter bit-for-bit unchanged; an applied step matches a NumPy
update (SGD, Momentum, Adam; dense and sparse) or, for the decayed AdamW-style groups, changed
the variables; every variable is finite; ``global_step`` / ``iterations`` / the scheduler's
``num_steps`` moved only on applied steps; the loss-scale state (scale and counters) equals a
pure-Python twin of the rule written here, sharing no code with the package.

    python scripts/fuzz_campaign.py --seed 0 --steps 10000        # the full campaign
    python scripts/fuzz_campaign.py --seed 0 --steps 300          # a short slice
    python scripts/fuzz_campaign.py --seed 0 --case 17 --verbose  # one case again

It prints the counts (steps, overflows injected, skipped, applied, mismatches) and exits 1 when
any mismatch was found, after printing each failing case's parameters.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

FRONTENDS = ("npu_graph", "npu_function", "megatron", "grad_scaler", "keras")
KINDS = ("inf", "nan", "saturated", "register", "cond")
DTYPES = ("float16", "bfloat16", "float32")
F32 = np.float32
F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = np.finfo(np.float32).tiny      # float32's smallest normal number, 2**-126
DTYPE_MAX = {"float16": 65504.0, "bfloat16": float(np.float32(3.3895313892515355e38)),
             "float32": F32_MAX}


# ---------------------------------------------------------------------------------------------
# Rounding to the compute dtype, in NumPy
# ---------------------------------------------------------------------------------------------
def _round_bf16(x):
    b = np.asarray(x, np.float32).copy().view(np.uint32)
    finite = np.isfinite(b.view(np.float32))
    rounding = ((b >> 16) & 1) + np.uint32(0x7FFF)
    r = np.where(finite, (b + rounding) & np.uint32(0xFFFF0000), b & np.uint32(0xFFFF0000))
    return r.astype(np.uint32).view(np.float32)


def round_to(dtype, x):
    """``x`` (float32 values) rounded to ``dtype`` and returned as float32."""
    x = np.asarray(x, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "float16":
            return x.astype(np.float16).astype(np.float32)
        if dtype == "bfloat16":
            return _round_bf16(x)
    return x


# ---------------------------------------------------------------------------------------------
# Pure twins of the loss-scale rules (written from the documented rules; no package code)
# ---------------------------------------------------------------------------------------------
class AscendExponentialTwin:
    """Ascend's ExponentialUpdateLossScaleManager."""

    def __init__(self, init, incr_every, decr_every, incr_ratio, decr_ratio):
        self.scale, self.good, self.bad = F32(init), 0, 0
        self.incr_every, self.decr_every = incr_every, decr_every
        self.incr_ratio, self.decr_ratio = F32(incr_ratio), F32(decr_ratio)
        self.ceiling = F32(3.4e38 / float(incr_ratio))

    def step(self, overflowed):
        if not overflowed:
            if self.good + 1 >= self.incr_every:
                if self.scale < self.ceiling:
                    self.scale = F32(self.scale * self.incr_ratio)
                self.good = self.bad = 0
            else:
                self.good += 1
        elif self.bad + 1 >= self.decr_every:
            self.scale = max(F32(1.0), F32(self.scale * self.decr_ratio))
            self.good = self.bad = 0
        else:
            self.bad += 1
            self.good = 0

    def state(self):
        return {"loss_scale": float(self.scale), "good_steps": self.good, "bad_steps": self.bad}


class FixedTwin:
    def __init__(self, scale):
        self.scale = F32(scale)

    def step(self, overflowed):  # pylint: disable=unused-argument
        pass

    def state(self):
        return {"loss_scale": float(self.scale)}


class MegatronDynamicTwin:
    """Megatron-Core's DynamicGradScaler (cumulative hysteresis, refilled by a growth)."""

    def __init__(self, init, min_scale, growth_factor, backoff_factor, growth_interval,
                 hysteresis):
        self.scale, self.min_scale = F32(init), F32(min_scale)
        self.growth_factor, self.backoff_factor = F32(growth_factor), F32(backoff_factor)
        self.growth_interval, self.hysteresis = growth_interval, hysteresis
        self.growth_tracker, self.hysteresis_tracker = 0, hysteresis

    def step(self, overflowed):
        if overflowed:
            self.growth_tracker = 0
            self.hysteresis_tracker -= 1
            if self.hysteresis_tracker <= 0:
                self.scale = max(F32(self.scale * self.backoff_factor), self.min_scale)
        else:
            self.growth_tracker += 1
            if self.growth_tracker == self.growth_interval:
                self.growth_tracker = 0
                self.hysteresis_tracker = self.hysteresis
                with np.errstate(over="ignore"):
                    grown = F32(self.scale * self.growth_factor)
                self.scale = min(grown, F32(F32_MAX))

    def state(self):
        return {"scale": float(self.scale), "growth_tracker": self.growth_tracker,
                "hysteresis_tracker": self.hysteresis_tracker}


class TorchScalerTwin:
    """torch.amp.GradScaler's update rule; backoff stops at float32's smallest normal number."""

    def __init__(self, init, growth_factor, backoff_factor, growth_interval):
        self.scale, self.tracker = F32(init), 0
        self.growth_factor, self.backoff_factor = F32(growth_factor), F32(backoff_factor)
        self.growth_interval = growth_interval

    def step(self, overflowed):
        if overflowed:
            with np.errstate(under="ignore"):
                self.scale = max(F32(self.scale * self.backoff_factor), F32_TINY)
            self.tracker = 0
        else:
            self.tracker += 1
            if self.tracker == self.growth_interval:
                with np.errstate(over="ignore"):
                    grown = F32(self.scale * self.growth_factor)
                if np.isfinite(grown):        # torch never grows the scale to inf
                    self.scale = grown
                self.tracker = 0

    def state(self):
        return {"scale": float(self.scale), "growth_tracker": self.tracker}


class KerasTwin:
    """The Keras dynamic loss scale: halve on overflow (never below 1), double after N finite;
    a doubling that would reach inf keeps the scale (Keras 2's rule, the package's on Keras 2
    and 3: the scale never becomes infinite)."""

    def __init__(self, init, growth_steps):
        self.scale, self.counter, self.growth_steps = F32(init), 0, growth_steps

    def step(self, overflowed):
        if overflowed:
            self.scale = max(F32(self.scale * F32(0.5)), F32(1.0))
            self.counter = 0
        else:
            self.counter += 1
            if self.counter == self.growth_steps:
                with np.errstate(over="ignore"):
                    doubled = F32(self.scale * F32(2.0))
                if np.isfinite(doubled):
                    self.scale = doubled
                self.counter = 0

    def state(self):
        return {"loss_scale": float(self.scale)}


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------
def make_case(seed, index, frontends=FRONTENDS, steps=None):
    """The parameters of case ``index`` of campaign ``seed`` (a plain, JSON-able dict)."""
    rng = np.random.default_rng([int(seed), int(index)])
    frontend = frontends[int(rng.integers(len(frontends)))]
    case = {"seed": int(seed), "case": int(index), "frontend": frontend,
            "case_seed": int(rng.integers(2 ** 31))}
    # traced and eager front ends pay their tracing once per case: longer cases for them
    low, high = (40, 121) if frontend in ("npu_graph", "megatron") else (150, 301)
    case["steps"] = int(steps if steps is not None else rng.integers(low, high))
    case["dtype"] = DTYPES[int(rng.integers(3))]
    n_dense = int(rng.integers(1, 4))
    case["dense_shapes"] = [[int(rng.integers(1, 6)), int(rng.integers(1, 6))]
                            for _ in range(n_dense)]
    sparse_ok = frontend != "keras"
    case["sparse"] = ([int(rng.integers(3, 9)), int(rng.integers(1, 4)), int(rng.integers(1, 6))]
                      if sparse_ok and rng.random() < 0.5 else None)   # rows, width, lookups
    optimizers = ["sgd", "momentum", "adam"]
    if frontend == "npu_graph":   # the scheduler's graph mode (eager: scheduler.step())
        optimizers.append("adamw_groups")
    if frontend == "keras":
        optimizers = ["sgd"]
    case["optimizer"] = optimizers[int(rng.integers(len(optimizers)))]
    case["lr"] = float(F32(10.0 ** rng.uniform(-3, -1)))
    case["momentum"] = float(F32(rng.choice([0.5, 0.9])))
    case["clip"] = (float(F32(rng.uniform(0.05, 2.0)))
                    if frontend != "keras" and rng.random() < 0.4 else 0.0)
    case["accumulation"] = (int(rng.integers(2, 5))
                            if frontend in ("npu_graph", "npu_function") and rng.random() < 0.4
                            else 1)
    case["overflow_rate"] = float(rng.choice([0.05, 0.15, 0.3]))
    kinds = list(KINDS)
    case["kinds"] = kinds
    # the loss-scale rule
    if frontend in ("npu_graph", "npu_function"):
        if rng.random() < 0.25:
            case["rule"] = {"name": "fixed", "scale": float(2.0 ** int(rng.integers(0, 20)))}
        else:
            case["rule"] = {"name": "exponential",
                            "init": float(2.0 ** int(rng.integers(0, 34))),
                            "incr_every": int(rng.integers(1, 12)),
                            "decr_every": int(rng.integers(1, 4)),
                            "incr_ratio": float(rng.choice([2.0, 1.5, 3.0])),
                            "decr_ratio": float(rng.choice([0.5, 0.8, 0.25]))}
    elif frontend == "megatron":
        if case["dtype"] == "bfloat16" and rng.random() < 0.3:
            case["rule"] = {"name": "none"}
        elif rng.random() < 0.25:
            case["rule"] = {"name": "constant", "scale": float(2.0 ** int(rng.integers(0, 14)))}
        else:
            init = float(2.0 ** int(rng.integers(0, 33)))
            case["rule"] = {"name": "megatron_dynamic", "init": init,
                            "min_scale": float(min(init, 2.0 ** int(rng.integers(0, 4)))),
                            "growth_factor": float(rng.choice([2.0, 4.0])),
                            "backoff_factor": float(rng.choice([0.5, 0.25])),
                            "growth_interval": int(rng.integers(1, 10)),
                            "hysteresis": int(rng.integers(1, 4))}
    elif frontend == "grad_scaler":
        case["rule"] = {"name": "torch", "init": float(2.0 ** int(rng.integers(0, 20))),
                        "growth_factor": 2.0, "backoff_factor": float(rng.choice([0.5, 0.25])),
                        "growth_interval": int(rng.integers(1, 10))}
        case["traced"] = bool(rng.random() < 0.6)
    else:
        case["rule"] = {"name": "keras", "init": float(2.0 ** int(rng.integers(0, 20))),
                        "growth_steps": int(rng.integers(1, 10))}
    _draw_extremes(rng, case)
    return case


# Where the rules meet float32's limits. Drawn after everything else, so the draws above keep
# their values for every (seed, index).
EXTREMES = ("ceiling", "floor", "overflow_run")
TAMPERS = ("nan", "inf", "zero", "negative", "below_min", "wrong_shape")


def _draw_extremes(rng, case):
    """Sometimes moves a case to an edge of the scale's range, and sometimes makes it restore a
    tampered checkpoint of its loss-scale state at one step (then the untampered one)."""
    rule, pick = case["rule"], rng.random()
    case["extreme"] = None
    dynamic = rule["name"] in ("exponential", "megatron_dynamic", "torch", "keras")
    if dynamic and pick < 0.12:
        # grow every step from just below the top of float32: 2**126 and 2**127 are reached
        case["extreme"] = "ceiling"
        case["dtype"] = "float32" if rng.random() < 0.5 else "bfloat16"
        case["overflow_rate"] = 0.05
        # one coefficient per tensor, of magnitude 1: each scaled gradient tensor sums to at
        # most the scale, so no step up there is too close to call
        case["dense_shapes"] = [[1, 1] for _ in case["dense_shapes"]]
        if case["sparse"]:
            case["sparse"] = [case["sparse"][0], 1, 1]
        start = float(2.0 ** int(rng.integers(122, 127)))
        if rule["name"] == "exponential":
            rule.update(init=start, incr_every=1, incr_ratio=2.0)
        elif rule["name"] == "megatron_dynamic":
            rule.update(init=start, growth_interval=1, growth_factor=2.0)
        elif rule["name"] == "torch":
            rule.update(init=start, growth_interval=1)
        else:
            rule.update(init=start, growth_steps=1)
    elif dynamic and pick < 0.22:
        # long runs of overflowed steps: the rule backs off to its floor (GradScaler, which has
        # no floor of 1, starts near the bottom of float32's normal range and goes below it)
        case["extreme"] = "floor" if rule["name"] == "torch" else "overflow_run"
        case["overflow_rate"] = 0.9
        if rule["name"] == "torch":
            rule.update(init=float(2.0 ** int(rng.integers(-126, -100))))
    elif dynamic and pick < 0.30:
        case["extreme"] = "overflow_run"
        case["overflow_rate"] = 0.7
    case["tamper"] = None
    if rule["name"] in ("exponential", "megatron_dynamic", "torch", "keras") \
            and rng.random() < 0.2:
        kinds = [k for k in TAMPERS
                 if k != "below_min" or rule["name"] in ("exponential", "megatron_dynamic")]
        case["tamper"] = {"at": int(rng.integers(1, max(2, case["steps"]))),
                          "kind": kinds[int(rng.integers(len(kinds)))],
                          "which": int(rng.integers(1 << 16))}
    # torch's habit, ported line by line: unscale_'s result ignored (the scaled gradients then
    # clipped or not) and given to step, which must refuse them and apply nothing
    case["torch_habit"] = None
    if case["frontend"] == "grad_scaler" and rng.random() < 0.3:
        case["torch_habit"] = {"at": int(rng.integers(0, max(1, case["steps"]))),
                               "clip": bool(rng.random() < 0.5)}


def make_schedule(case):
    """Per step: the feed values and what was injected (kind, term, micro-batch)."""
    rng = np.random.default_rng([case["case_seed"], 1])
    n_terms = len(case["dense_shapes"]) + (1 if case["sparse"] else 0)
    accum = case["accumulation"]
    schedule = []
    for step in range(case["steps"]):
        inj_micro = (int(rng.integers(accum))
                     if rng.random() < case["overflow_rate"] else None)
        kind = case["kinds"][int(rng.integers(len(case["kinds"])))]
        term = int(rng.integers(n_terms))
        micros = []
        for m in range(accum):
            feed = {"a": [], "inj": np.ones([n_terms], np.float32),
                    "z": np.zeros([n_terms], np.float32), "reg": False, "cond": False}
            for shape in case["dense_shapes"]:
                a = rng.uniform(-1, 1, shape).astype(np.float32)
                a.flat[0] = rng.choice([-1.0, 1.0])
                feed["a"].append(a)
            if case["sparse"]:
                rows, width, lookups = case["sparse"]
                feed["idx"] = rng.integers(0, rows, [lookups]).astype(np.int32)
                sa = rng.uniform(-1, 1, [lookups, width]).astype(np.float32)
                sa.flat[0] = rng.choice([-1.0, 1.0])
                feed["sa"] = sa
            injected = None
            if inj_micro == m:
                injected = {"kind": kind, "term": term, "micro": m}
                if kind == "inf":
                    feed["inj"][term] = np.inf
                elif kind == "nan":
                    feed["inj"][term] = np.nan
                elif kind == "saturated":
                    feed["z"][term] = rng.choice([-1.0, 1.0]) * DTYPE_MAX[case["dtype"]]
                elif kind == "register":
                    feed["reg"] = True
                else:
                    feed["cond"] = True
            micros.append((feed, injected))
        schedule.append({"step": step, "micros": micros,
                         "injected": [i for _, i in micros if i is not None]})
    return schedule


# ---------------------------------------------------------------------------------------------
# The model: linear in each variable, saturated like the device in saturation mode
# ---------------------------------------------------------------------------------------------
def build_loss(nls, case, dense, embedding, inp):
    """Loss of the inputs ``inp`` (tensors) and the variables (float32; computed in the dtype)."""
    dt = tf.as_dtype(case["dtype"])
    two = tf.constant(2.0, dt)
    terms = []
    for i, v in enumerate(dense):
        h = tf.cast(v, dt) * tf.cast(inp["a%d" % i] * inp["inj"][i], dt)
        h = nls.saturate(h + tf.cast(inp["z"][i], dt) * two)
        terms.append(tf.reduce_sum(tf.cast(h, tf.float32)))
    if embedding is not None:
        s = len(dense)
        rows = tf.gather(embedding, inp["idx"])
        h = tf.cast(rows, dt) * tf.cast(inp["sa"] * inp["inj"][s], dt)
        h = nls.saturate(h + tf.cast(inp["z"][s], dt) * two)
        terms.append(tf.reduce_sum(tf.cast(h, tf.float32)))
    loss = tf.add_n(terms)
    big = tf.constant(DTYPE_MAX[case["dtype"]], tf.float32)
    aux = tf.cond(inp["cond"],
                  lambda: tf.reduce_sum(tf.cast(nls.saturate(tf.cast(big, dt) * two),
                                                tf.float32)),
                  lambda: tf.constant(0.0))
    loss = loss + 0.0 * tf.stop_gradient(aux)
    with tf.control_dependencies([nls.emulation.record(inp["reg"])]):
        return tf.identity(loss)


def initial_values(case):
    rng = np.random.default_rng([case["case_seed"], 2])
    dense = [rng.normal(0, 1, shape).astype(np.float32) for shape in case["dense_shapes"]]
    emb = (rng.normal(0, 1, case["sparse"][:2]).astype(np.float32) if case["sparse"] else None)
    return dense, emb


def feed_tensors(feed, n_dense):
    out = {"inj": feed["inj"], "z": feed["z"], "reg": np.bool_(feed["reg"]),
           "cond": np.bool_(feed["cond"])}
    for i in range(n_dense):
        out["a%d" % i] = feed["a"][i]
    if "idx" in feed:
        out["idx"], out["sa"] = feed["idx"], feed["sa"]
    return out


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


def scaled_product(dt, s, a):
    """The scaled gradient ``s * a`` as TensorFlow's CPU kernels compute it in ``dt``.

    A bfloat16 or float32 product is computed in float32, and a float32 result below float32's
    smallest normal number is flushed to zero (the kernels run with flush-to-zero): at a scale
    near 2**-126 small gradients vanish. float16 products round to float16, whose subnormals are
    kept.
    """
    with np.errstate(under="ignore"):
        product = (s * round_to(dt, a)).astype(np.float32)
    if dt in ("bfloat16", "float32"):
        product = np.where(np.abs(product) < F32_TINY, np.copysign(F32(0.0), product), product)
    return round_to(dt, product)


def unscaled_grads(case, feed, scale, factors):
    """Per variable: dense float32 gradient (the embedding's as (indices, values) too)."""
    dt = case["dtype"]
    s = round_to(dt, F32(scale))

    def unscale(g):
        for factor in factors:
            g = (g * factor).astype(np.float32)
        return g

    grads = []
    for a in feed["a"]:
        grads.append(unscale(scaled_product(dt, s, a)))
    sparse = None
    if case["sparse"]:
        sparse = (feed["idx"], unscale(scaled_product(dt, s, feed["sa"])))
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

    def as_dict(self):
        return {k: getattr(self, k) for k in (
            "cases", "steps", "micro_batches", "injected", "skipped", "applied", "natural",
            "ambiguous", "reference_checked", "tampered", "habits", "mismatches")}


def _same_bits(a, b):
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
            if name in after and not _same_bits(before[name], after[name]):
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
        if all(_same_bits(before[n], after[n]) for n in model):
            tally.fail(case, step, "an applied step changed no variable")
    for name, (got, want) in counters.items():
        if int(got) != int(want):
            tally.fail(case, step, "counter %s is %s, expected %s" % (name, got, want))
    for key, want in twin_state.items():
        got = scale_state.get(key)
        if got is None or float(got) != float(want):
            tally.fail(case, step, "scale state %s is %r, the twin has %r" % (key, got, want))


# ---------------------------------------------------------------------------------------------
# Tampered checkpoints
# ---------------------------------------------------------------------------------------------
_SCALE_NAMES = ("loss_scale", "scale", "current_loss_scale", "dynamic_scale")
_COUNTER_NAMES = ("good_steps", "bad_steps", "growth_tracker", "counter", "step_counter")


def scale_state_keys(prefix):
    """The checkpoint's keys of loss-scale state, by the variable's own name (the last part of
    the key): ([scale keys], [counter keys])."""
    keys = sorted(tf.train.load_checkpoint(prefix).get_variable_to_dtype_map())
    return ([k for k in keys if _short_name(k) in _SCALE_NAMES],
            [k for k in keys if _short_name(k) in _COUNTER_NAMES])


def _tampered_value(value, kind, rule):
    value = np.asarray(value)
    if kind == "wrong_shape":
        return np.stack([value, value])
    if kind == "negative":
        return np.asarray(-3 if value.dtype.kind == "i" else -2.0, value.dtype)
    floats = {"nan": np.nan, "inf": np.inf, "zero": 0.0,
              "below_min": float(rule.get("min_scale", 1.0)) / 2.0}
    return np.asarray(floats[kind], value.dtype)


def tamper_checkpoint(prefix, out_prefix, tamper, rule):
    """Writes ``out_prefix``: the checkpoint ``prefix`` with one loss-scale value replaced by an
    impossible one (``tamper["kind"]``). Returns the key changed, or None when the checkpoint
    holds no value that kind applies to."""
    scales, counters = scale_state_keys(prefix)
    kind = tamper["kind"]
    candidates = counters + scales if kind in ("negative", "wrong_shape") else scales
    if not candidates:
        return None
    key = candidates[tamper["which"] % len(candidates)]
    reader = tf.train.load_checkpoint(prefix)
    dtypes = reader.get_variable_to_dtype_map()
    names = sorted(dtypes)
    tensors = []
    for name in names:
        value = reader.get_tensor(name)
        if name == key:
            value = _tampered_value(value, kind, rule)
        tensors.append(tf.constant(value, dtype=dtypes[name]))
    tf.raw_ops.SaveV2(prefix=out_prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=tensors)
    return key


def _short_name(key):
    """``opt/loss_scale/.ATTRIBUTES/VARIABLE_VALUE`` -> ``loss_scale``."""
    name = key.split("/.", 1)[0]
    return name.rsplit("/", 1)[-1].lstrip("_")


# ---------------------------------------------------------------------------------------------
# Front ends
# ---------------------------------------------------------------------------------------------
def _v1_optimizer(case):
    lr = case["lr"]
    if case["optimizer"] == "sgd":
        return tf.compat.v1.train.GradientDescentOptimizer(lr)
    if case["optimizer"] == "momentum":
        return tf.compat.v1.train.MomentumOptimizer(lr, case["momentum"])
    return tf.compat.v1.train.AdamOptimizer(lr, beta1=0.9, beta2=0.999, epsilon=1e-8)


def _make_twin(rule):
    name = rule["name"]
    if name == "exponential":
        return AscendExponentialTwin(rule["init"], rule["incr_every"], rule["decr_every"],
                                     rule["incr_ratio"], rule["decr_ratio"])
    if name in ("fixed", "constant"):
        return FixedTwin(rule["scale"])
    if name == "none":
        return FixedTwin(1.0)
    if name == "megatron_dynamic":
        return MegatronDynamicTwin(rule["init"], rule["min_scale"], rule["growth_factor"],
                                   rule["backoff_factor"], rule["growth_interval"],
                                   rule["hysteresis"])
    if name == "torch":
        return TorchScalerTwin(rule["init"], rule["growth_factor"], rule["backoff_factor"],
                               rule["growth_interval"])
    return KerasTwin(rule["init"], rule["growth_steps"])


def _make_manager(nls, rule):
    name = rule["name"]
    if name == "exponential":
        return nls.ExponentialUpdateLossScaleManager(
            rule["init"], rule["incr_every"], decr_every_n_nan_or_inf=rule["decr_every"],
            incr_ratio=rule["incr_ratio"], decr_ratio=rule["decr_ratio"])
    if name == "fixed":
        return nls.FixedLossScaleManager(rule["scale"])
    if name == "constant":
        return nls.ConstantGradScaler(rule["scale"])
    if name == "none":
        return None
    return nls.DynamicGradScaler(rule["init"], rule["min_scale"], rule["growth_factor"],
                                 rule["backoff_factor"], rule["growth_interval"],
                                 rule["hysteresis"])


def _slot_names(case):
    return {"sgd": [], "momentum": ["momentum"], "adam": ["m", "v"]}.get(case["optimizer"], [])


class _Runner:
    """Drives one case: the schedule, the twin, the reference, the checks."""

    def __init__(self, nls, case, tally, verbose):
        self.nls, self.case, self.tally, self.verbose = nls, case, tally, verbose
        self.twin = _make_twin(case["rule"])
        self.reference = Reference(case)
        self.applied = 0
        self.skipped = 0

    # subclasses: read() -> {name: array}; run_micro(feed) ; scale_state() ; counters()
    def model_names(self):
        names = ["d%d" % i for i in range(len(self.case["dense_shapes"]))]
        return names + (["emb"] if self.case["sparse"] else [])

    def twin_scale(self):
        return float(self.twin.scale)

    def reference_update(self, before, micro_grads, t):
        """Expected values after an applied step from the micro-batches' gradients."""
        case = self.case
        if case["optimizer"] not in ("sgd", "momentum", "adam"):
            return None
        names = self.model_names()
        accum = case["accumulation"]
        total = None
        sparse_rows = {}
        for grads, sparse in micro_grads:
            factor = clip_factor(case, grads, sparse) if case["clip"] else 1.0
            dense = [g * F32(factor) if case["clip"] else g for g in grads]
            if sparse is not None:
                sp = (sparse[0], sparse[1] * F32(factor) if case["clip"] else sparse[1])
                dense.append(densify(case, sp))
                if accum == 1:
                    mask = np.zeros([case["sparse"][0]], bool)
                    mask[sparse[0]] = True
                    sparse_rows["emb"] = mask
            total = dense if total is None else [t + d for t, d in zip(total, dense)]
        if accum > 1:
            total = [(t / F32(accum)).astype(np.float32) for t in total]
        return self.reference.expected(before, dict(zip(names, total)), sparse_rows, t)

    def run(self):
        case, tally = self.case, self.tally
        schedule = make_schedule(case)
        tally.cases += 1
        if case.get("extreme"):
            tally.extremes[case["extreme"]] = tally.extremes.get(case["extreme"], 0) + 1
        fe = tally.by_frontend.setdefault(case["frontend"], {"cases": 0, "steps": 0,
                                                             "injected": 0, "skipped": 0})
        fe["cases"] += 1
        last = case["accumulation"] - 1
        after = None
        tamper = case.get("tamper")
        for item in schedule:
            if tamper and item["step"] == tamper["at"]:
                after = self.restore_tampered(item, after)
            after = self.before_step(item, after)
            scale = self.twin_scale()
            natural = natural_overflow(case, scale, [feed for feed, _ in item["micros"]])
            micro_grads = []
            for k, (feed, inj) in enumerate(item["micros"]):
                before = self.read() if after is None else after   # nothing ran in between
                self.run_micro(feed)
                after = self.read()
                tally.micro_batches += 1
                if inj is not None:
                    tally.injected += 1
                    fe["injected"] += 1
                    tally.by_kind[inj["kind"]] += 1
                micro_grads.append(unscaled_grads(case, feed, scale, unscale_factors(scale)))
                if k < last:   # a micro-batch that does not complete an accumulation group
                    check_step(tally, case, item["step"], before, after, False, False, None,
                               self.counters(), {}, {})
            applied = self.was_applied(before, after)
            if item["injected"]:
                expect_apply = False
            elif natural is None:
                expect_apply = None
                tally.ambiguous += 1
            else:
                expect_apply = not natural
                tally.natural += int(natural)
            self.applied += int(applied)
            self.skipped += int(not applied)
            self.twin.step(not applied if expect_apply is None else not expect_apply)
            ref_after = None
            if applied and expect_apply:
                with np.errstate(all="ignore"):
                    ref_after = self.reference_update(before, micro_grads, self.applied)
            check_step(tally, case, item["step"], before, after, applied, expect_apply, ref_after,
                       self.counters(), self.twin.state(), self.scale_state())
            tally.steps += 1
            fe["steps"] += 1
            tally.skipped += int(not applied)
            tally.applied += int(applied)
            fe["skipped"] += int(not applied)
        self.close()

    def close(self):
        pass

    # -- a tampered checkpoint: refused (at restore or at the next step), nothing half-applied --
    # subclasses: save(prefix), restore(prefix), clear_register()
    def restore_tampered(self, item, after):
        case, tally, step = self.case, self.tally, item["step"]
        state = self.read() if after is None else after
        folder = tempfile.mkdtemp(prefix="nls-fuzz-ckpt-")
        try:
            good = self.save(os.path.join(folder, "good"))
            key = tamper_checkpoint(good, os.path.join(folder, "bad"), case["tamper"],
                                    case["rule"])
            if key is None:
                tally.fail(case, step, "the checkpoint holds no loss-scale state to tamper "
                           "(keys: %s)" % sorted(tf.train.load_checkpoint(good)
                                                 .get_variable_to_dtype_map()))
                return state
            tally.tampered += 1
            probe = dict(item["micros"][0][0])
            probe.update(inj=np.ones_like(probe["inj"]), z=np.zeros_like(probe["z"]),
                         reg=False, cond=False)
            try:
                self.restore(os.path.join(folder, "bad"))
                self.run_micro(probe)
            except Exception as error:  # pylint: disable=broad-except
                message = str(error)
                if _short_name(key) not in message:
                    tally.fail(case, step, "tampered %s (%s) refused, but the error does not "
                               "name it: %s" % (key, case["tamper"]["kind"], message[-700:]))
            else:
                tally.fail(case, step, "a checkpoint with %s %s restored and stepped without "
                           "an error" % (key, case["tamper"]["kind"]))
            self.clear_register()
            self.restore(good)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        restored = self.read()
        for name, value in state.items():
            if name in restored and not _same_bits(value, restored[name]):
                tally.fail(case, step, "%s differs after restoring the untampered checkpoint"
                           % name)
        for key_, want in self.twin.state().items():
            got = self.scale_state().get(key_)
            if got is None or float(got) != float(want):
                tally.fail(case, step, "after the restores, scale state %s is %r, the twin has "
                           "%r" % (key_, got, want))
        return restored

    def clear_register(self):
        self.nls.emulation.npu_clear_float_status_v2()

    def before_step(self, item, after):  # pylint: disable=unused-argument
        """A front end's probe before the step of ``item``; returns the values read after it."""
        return after


class NpuGraphRunner(_Runner):
    """NPULossScaleOptimizer (or the Megatron optimizer) in a tf.compat.v1 graph and Session."""

    def __init__(self, nls, case, tally, verbose):
        super().__init__(nls, case, tally, verbose)
        self.graph = tf.Graph()
        with self.graph.as_default():
            self._build()
        self.graph.finalize()

    def _placeholders(self):
        case = self.case
        n_terms = len(case["dense_shapes"]) + (1 if case["sparse"] else 0)
        ph = {"inj": tf.compat.v1.placeholder(tf.float32, [n_terms]),
              "z": tf.compat.v1.placeholder(tf.float32, [n_terms]),
              "reg": tf.compat.v1.placeholder(tf.bool, []),
              "cond": tf.compat.v1.placeholder(tf.bool, [])}
        for i, shape in enumerate(case["dense_shapes"]):
            ph["a%d" % i] = tf.compat.v1.placeholder(tf.float32, shape)
        if case["sparse"]:
            ph["idx"] = tf.compat.v1.placeholder(tf.int32, [case["sparse"][2]])
            ph["sa"] = tf.compat.v1.placeholder(tf.float32, case["sparse"][2:0:-1])
        return ph

    def _build(self):
        nls, case = self.nls, self.case
        dense0, emb0 = initial_values(case)
        self.ph = self._placeholders()
        self.dense = [tf.compat.v1.get_variable("d%d" % i, initializer=v)
                      for i, v in enumerate(dense0)]
        self.emb = tf.compat.v1.get_variable("emb", initializer=emb0) if emb0 is not None else None
        variables = self.dense + ([self.emb] if self.emb is not None else [])
        self.global_step = tf.compat.v1.train.get_or_create_global_step()
        self.scheduler = None
        manager = _make_manager(nls, case["rule"])
        self.manager = manager
        if case["frontend"] == "megatron":
            self.opt = nls.MegatronMixedPrecisionOptimizer(
                _v1_optimizer(case), manager, clip_grad=case["clip"],
                fp16=case["dtype"] == "float16" and manager is not None,
                bf16=case["dtype"] == "bfloat16")
        else:
            if case["optimizer"] == "adamw_groups":
                inner = nls.ParamGroupOptimizer(
                    lambda lr, group: tf.compat.v1.train.AdamOptimizer(lr),
                    overrides=[("emb*", nls.ParamGroupOverride(wd_mult=0.0))])
                self.scheduler = nls.OptimizerParamScheduler(
                    inner, init_lr=case["lr"] / 4, max_lr=case["lr"], min_lr=case["lr"] / 10,
                    lr_warmup_steps=3, lr_decay_steps=50, lr_decay_style="cosine",
                    start_wd=0.01, end_wd=0.05, wd_incr_steps=50, wd_incr_style="linear")
            else:
                inner = _v1_optimizer(case)
            self.opt = nls.NPULossScaleOptimizer(inner, manager,
                                                 accumulation_steps=case["accumulation"])
        loss = build_loss(nls, case, self.dense, self.emb, self.ph)
        gvs = self.opt.compute_gradients(loss, var_list=variables)
        if case["clip"] and case["frontend"] != "megatron":
            grads, _ = tf.clip_by_global_norm([g for g, _ in gvs], case["clip"])
            gvs = list(zip(grads, [v for _, v in gvs]))
        self.train_op = self.opt.apply_gradients(gvs, global_step=self.global_step)
        self.skipped_steps = self.opt.skipped_steps
        # what must not change on a skipped step
        self.watch = {}
        for i, v in enumerate(self.dense):
            self.watch["d%d" % i] = v
        if self.emb is not None:
            self.watch["emb"] = self.emb
        inner_opt = self.opt.inner_optimizer
        if case["frontend"] == "megatron":
            inner_opt = inner_opt.inner_optimizer
        for name, v in zip(self.model_names(), variables):
            for slot in _slot_names(case):
                s = inner_opt.get_slot(v, slot)
                if s is not None:
                    self.watch[name + "/" + slot] = s
        extra = [v for v in self.opt.inner_optimizer.variables()
                 if all(v is not w for w in self.watch.values())]
        for k, v in enumerate(extra):
            self.watch["opt_var%d_%s" % (k, v.op.name)] = v
        self.watch["global_step"] = self.global_step
        if self.scheduler is not None:
            self.watch["num_steps"] = self.scheduler.num_steps_variable
        # the scale state
        self.megatron_dynamic = case["rule"]["name"] == "megatron_dynamic"
        if not self.megatron_dynamic:
            self.scale_fetch = {"loss_scale": self.opt.loss_scale}
            if case["rule"]["name"] == "exponential":
                g = self.graph
                self.scale_fetch["good_steps"] = g.get_tensor_by_name("good_steps:0")
                self.scale_fetch["bad_steps"] = g.get_tensor_by_name("bad_steps:0")
        self.saver = tf.compat.v1.train.Saver()
        self.clear_op = nls.emulation.npu_clear_float_status_v2()
        init = tf.compat.v1.global_variables_initializer()
        self.sess = tf.compat.v1.Session(graph=self.graph)
        self.sess.run(init)

    def read(self):
        return {k: np.asarray(v) for k, v in self.sess.run(self.watch).items()}

    def run_micro(self, feed):
        values = feed_tensors(feed, len(self.case["dense_shapes"]))
        self.sess.run(self.train_op, {self.ph[k]: v for k, v in values.items()})

    def was_applied(self, before, after):
        return int(after["global_step"]) == int(before["global_step"]) + 1

    def counters(self):
        fetch = {"global_step": self.global_step, "skipped_steps": self.skipped_steps}
        if self.scheduler is not None:
            fetch["num_steps"] = self.watch["num_steps"]
        values = self.sess.run(fetch)
        want = {"global_step": self.applied, "skipped_steps": self.skipped,
                "num_steps": self.applied}
        return {k: (v, want[k]) for k, v in values.items()}

    def scale_state(self):
        if self.megatron_dynamic:
            return self.manager.state_dict(session=self.sess)
        return self.sess.run(self.scale_fetch)

    def save(self, prefix):
        with self.graph.as_default():
            return self.saver.save(self.sess, prefix, write_meta_graph=False)

    def restore(self, prefix):
        with self.graph.as_default():
            self.saver.restore(self.sess, prefix)

    def clear_register(self):
        self.sess.run(self.clear_op)

    def close(self):
        self.sess.close()


class _EagerV1Runner(_Runner):
    """A case stepped eagerly (or through a tf.function) with a tf.compat.v1.train optimizer
    (``_v1_inner()``) and a ``global_step`` variable advanced on applied steps."""

    def __init__(self, nls, case, tally, verbose):
        super().__init__(nls, case, tally, verbose)
        nls.emulation.npu_clear_float_status_v2()
        dense0, emb0 = initial_values(case)
        self.dense = [tf.Variable(v, name="d%d" % i) for i, v in enumerate(dense0)]
        self.emb = tf.Variable(emb0, name="emb") if emb0 is not None else None
        self.variables = self.dense + ([self.emb] if self.emb is not None else [])
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")

    def _v1_inner(self):
        raise NotImplementedError

    def watch(self):
        """Model variables, slots and counters (slots appear with the first apply)."""
        inner = self._v1_inner()
        w = {name: v for name, v in zip(self.model_names(), self.variables)}
        for name, v in zip(self.model_names(), self.variables):
            for slot in _slot_names(self.case):
                s = inner.get_slot(v, slot)
                if s is not None:
                    w[name + "/" + slot] = s
        known = [id(v) for v in w.values()]
        for k, v in enumerate(v for v in inner.variables() if id(v) not in known):
            w["opt_var%d" % k] = v
        w["global_step"] = self.global_step
        return w

    def read(self):
        return {k: np.asarray(v.numpy()) for k, v in self.watch().items()}

    def run_micro(self, feed):
        values = feed_tensors(feed, len(self.case["dense_shapes"]))
        self.step({k: tf.constant(v) for k, v in values.items()})

    def was_applied(self, before, after):
        return int(after["global_step"]) == int(before["global_step"]) + 1

    def checkpoint(self):
        """A tf.train.Checkpoint of everything a training script would save."""
        return tf.train.Checkpoint(variables=list(self.variables), global_step=self.global_step,
                                   **self.checkpointed())

    def checkpointed(self):
        raise NotImplementedError

    def save(self, prefix):
        return self.checkpoint().write(prefix)

    def restore(self, prefix):
        self.checkpoint().read(prefix).expect_partial()


class NpuFunctionRunner(_EagerV1Runner):
    """NPULossScaleOptimizer inside a tf.function (TF2 variables, eager state)."""

    def __init__(self, nls, case, tally, verbose):
        super().__init__(nls, case, tally, verbose)
        variables = self.variables
        self.manager = _make_manager(nls, case["rule"])
        self.opt = nls.NPULossScaleOptimizer(_v1_optimizer(case), self.manager,
                                             accumulation_steps=case["accumulation"])
        clip = case["clip"]
        opt = self.opt

        @tf.function
        def step(inp):
            gvs = opt.compute_gradients(
                lambda: build_loss(nls, case, self.dense, self.emb, inp), var_list=variables)
            if clip:
                grads, _ = tf.clip_by_global_norm([g for g, _ in gvs], clip)
                gvs = list(zip(grads, [v for _, v in gvs]))
            opt.apply_gradients(gvs, global_step=self.global_step)

        self.step = step

    def _v1_inner(self):
        return self.opt.inner_optimizer

    def checkpointed(self):
        return {"optimizer": self.opt}

    def counters(self):
        return {"global_step": (self.global_step.numpy(), self.applied),
                "skipped_steps": (self.opt.skipped_steps.numpy(), self.skipped)}

    def scale_state(self):
        state = {"loss_scale": float(self.opt.loss_scale.numpy())}
        if self.case["rule"]["name"] == "exponential":
            for v in self.opt.variables():
                short = v.name.split(":")[0].split("/")[-1]
                if short in ("good_steps", "bad_steps"):
                    state[short] = int(v.numpy())
        return state


class GradScalerRunner(_EagerV1Runner):
    """nls.GradScaler, eager or in a tf.function, with a tf.compat.v1.train optimizer."""

    def __init__(self, nls, case, tally, verbose):
        super().__init__(nls, case, tally, verbose)
        rule = case["rule"]
        self.scaler = nls.GradScaler(rule["init"], rule["growth_factor"], rule["backoff_factor"],
                                     rule["growth_interval"], backend="emulation")
        self.opt = _v1_optimizer(case)
        scaler, opt, clip, variables = self.scaler, self.opt, case["clip"], self.variables

        def step(inp):
            with tf.GradientTape() as tape:
                loss = build_loss(nls, case, self.dense, self.emb, inp)
                scaled = scaler.scale(loss)
            grads = tape.gradient(scaled, variables)
            if clip:
                grads = scaler.unscale_(opt, grads)
                grads, _ = tf.clip_by_global_norm(grads, clip)
            scaler.step(opt, list(zip(grads, variables)), global_step=self.global_step)
            scaler.update()

        self.step = tf.function(step) if case.get("traced") else step

    def _v1_inner(self):
        return self.opt

    def checkpointed(self):
        return {"optimizer": self.opt, "scaler": self.scaler}

    def before_step(self, item, after):
        """At the drawn step, torch's habit through a scaler holding the same state and the
        case's own optimizer: step must raise and leave every value as it was."""
        habit, case = self.case.get("torch_habit"), self.case
        if not habit or item["step"] != habit["at"]:
            return after
        state = self.read() if after is None else after
        nls, variables, opt = self.nls, self.variables, self.opt
        rule = case["rule"]
        probe = nls.GradScaler(rule["init"], rule["growth_factor"], rule["backoff_factor"],
                               rule["growth_interval"], backend="emulation")
        probe.load_state_dict(self.scaler.state_dict())
        values = feed_tensors(item["micros"][0][0], len(case["dense_shapes"]))
        inp = {k: tf.constant(v) for k, v in values.items()}

        def habit_step(inp):
            with tf.GradientTape() as tape:
                scaled = probe.scale(build_loss(nls, case, self.dense, self.emb, inp))
            grads = tape.gradient(scaled, variables)
            probe.unscale_(opt, grads)                       # the result ignored, as in torch
            if habit["clip"]:
                grads, _ = tf.clip_by_global_norm(grads, case["clip"] or 1.0)
            probe.step(opt, list(zip(grads, variables)), global_step=self.global_step)
            probe.update()

        run = tf.function(habit_step) if case.get("traced") else habit_step
        self.tally.habits += 1
        try:
            run(inp)
        except RuntimeError as error:
            if "unscale_" not in str(error):
                self.tally.fail(case, item["step"], "torch's habit refused without naming "
                                "unscale_: %s" % str(error)[:300])
        else:
            self.tally.fail(case, item["step"], "torch's habit (unscale_'s result ignored%s) "
                            "was stepped without an error"
                            % (", then clipped" if habit["clip"] else ""))
        self.clear_register()
        now = self.read()
        for name, value in state.items():
            if name in now and not _same_bits(value, now[name]):
                self.tally.fail(case, item["step"], "%s changed by a refused step" % name)
        return now

    def counters(self):
        return {"global_step": (self.global_step.numpy(), self.applied)}

    def scale_state(self):
        sd = self.scaler.state_dict()
        return {"scale": float(sd["scale"]), "growth_tracker": int(sd["_growth_tracker"])}


class KerasRunner(_Runner):
    """npu_loss_scale.keras.NpuLossScaleOptimizer around Keras SGD, in a tf.function."""

    def __init__(self, nls, case, tally, verbose):
        super().__init__(nls, case, tally, verbose)
        from npu_loss_scale.keras import NpuLossScaleOptimizer
        nls.emulation.npu_clear_float_status_v2()
        keras3 = self.keras3 = hasattr(tf.keras.optimizers, "LossScaleOptimizer")
        dense0, _ = initial_values(case)
        self.dense = [tf.Variable(v, name="d%d" % i) for i, v in enumerate(dense0)]
        self.variables = list(self.dense)
        rule = case["rule"]
        self.inner = tf.keras.optimizers.SGD(case["lr"])
        self.opt = NpuLossScaleOptimizer(self.inner, initial_scale=rule["init"],
                                         dynamic_growth_steps=rule["growth_steps"])
        opt, variables = self.opt, self.variables

        @tf.function
        def step(inp):
            with tf.GradientTape() as tape:
                loss = build_loss(nls, case, self.dense, None, inp)
                scaled = opt.scale_loss(loss) if keras3 else opt.get_scaled_loss(loss)
            grads = tape.gradient(scaled, variables)
            if not keras3:
                grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(list(zip(grads, variables)))

        self.step = step

    def read(self):
        out = {name: np.asarray(v.numpy()) for name, v in zip(self.model_names(), self.variables)}
        if self.keras3:   # Keras 3 counts applied steps only; Keras 2 counts every step
            out["iterations"] = np.asarray(self.inner.iterations.numpy())
        return out

    def run_micro(self, feed):
        values = feed_tensors(feed, len(self.case["dense_shapes"]))
        self.step({k: tf.constant(v) for k, v in values.items()})

    def was_applied(self, before, after):
        return bool(self.opt.last_step_finite.numpy())

    def counters(self):
        want = self.applied if self.keras3 else self.applied + self.skipped
        return {"iterations": (self.inner.iterations.numpy(), want)}

    def scale_state(self):
        return {"loss_scale": float(self.opt.loss_scale.numpy())}

    def _checkpoint(self):
        return tf.train.Checkpoint(variables=list(self.variables), optimizer=self.opt)

    def save(self, prefix):
        return self._checkpoint().write(prefix)

    def restore(self, prefix):
        self._checkpoint().read(prefix).expect_partial()


RUNNERS = {"npu_graph": NpuGraphRunner, "npu_function": NpuFunctionRunner,
           "megatron": NpuGraphRunner, "grad_scaler": GradScalerRunner, "keras": KerasRunner}


# ---------------------------------------------------------------------------------------------
# The campaign
# ---------------------------------------------------------------------------------------------
def run_case(case, tally, verbose=False):
    import npu_loss_scale as nls  # pylint: disable=import-outside-toplevel
    nls.set_device_sat_mode(nls.emulation.SATURATION)
    before = tally.mismatches
    runner = RUNNERS[case["frontend"]](nls, case, tally, verbose)
    runner.run()
    if verbose or tally.mismatches > before:
        print("case %d %s: %d steps, %d applied, %d skipped, %d mismatches"
              % (case["case"], case["frontend"], case["steps"], runner.applied, runner.skipped,
                 tally.mismatches - before), flush=True)
    return runner


def run_campaign(seed=0, steps=10000, frontends=FRONTENDS, cases=None, verbose=False,
                 steps_per_case=None, out=sys.stdout):
    """Runs cases of campaign ``seed`` until ``steps`` optimizer steps have run (or only the
    case indices in ``cases``). Returns the Tally."""
    tally = Tally()
    start = time.time()
    index = 0
    indices = list(cases) if cases is not None else None
    while True:
        if indices is not None:
            if not indices:
                break
            index = indices.pop(0)
        elif tally.steps >= steps:
            break
        case = make_case(seed, index, tuple(frontends), steps_per_case)
        if indices is None and tally.steps + case["steps"] > steps:
            case["steps"] = max(1, steps - tally.steps)
        run_case(case, tally, verbose)
        index += 1
    tally.seconds = time.time() - start
    report(tally, seed, out)
    return tally


def report(tally, seed, out=sys.stdout):
    print("fuzz campaign seed %d: TensorFlow %s, %.0f s" % (seed, tf.__version__, tally.seconds),
          file=out)
    print("  cases %d, steps %d (micro-batches %d), overflows injected %d, skipped %d, "
          "applied %d (checked against NumPy %d), "
          "natural overflows %d, ambiguous %d, mismatches %d"
          % (tally.cases, tally.steps, tally.micro_batches, tally.injected, tally.skipped,
             tally.applied, tally.reference_checked, tally.natural,
             tally.ambiguous, tally.mismatches), file=out)
    print("  injected by kind: " + ", ".join("%s %d" % kv for kv in tally.by_kind.items()),
          file=out)
    print("  cases at an extreme: " + ", ".join("%s %d" % (k, tally.extremes.get(k, 0))
                                               for k in EXTREMES)
          + "; tampered checkpoints restored %d; torch habits refused %d"
          % (tally.tampered, tally.habits), file=out)
    for name, fe in sorted(tally.by_frontend.items()):
        print("  %-13s cases %4d  steps %6d  injected %5d  skipped %5d"
              % (name, fe["cases"], fe["steps"], fe["injected"], fe["skipped"]), file=out)
    for failure in tally.failures:
        print("MISMATCH step %d: %s\n  case: %s" % (failure["step"], failure["what"],
                                                   json.dumps(failure["case"])), file=out)
    out.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=10000, help="total optimizer steps")
    parser.add_argument("--case", type=int, action="append", dest="cases",
                        help="run only this case index (repeatable)")
    parser.add_argument("--frontends", default=",".join(FRONTENDS),
                        help="comma-separated subset of " + ",".join(FRONTENDS))
    parser.add_argument("--steps-per-case", type=int, default=None)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    frontends = [f for f in args.frontends.split(",") if f]
    for f in frontends:
        if f not in FRONTENDS:
            parser.error("--frontends: unknown front end %r; accepted: %s"
                         % (f, ", ".join(FRONTENDS)))
    tally = run_campaign(args.seed, args.steps, frontends, args.cases, args.verbose,
                         args.steps_per_case)
    return 1 if tally.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
