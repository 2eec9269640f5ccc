"""The fuzz campaign's cases: what is drawn from ``(seed, case index)`` (front end, model, dtype,
optimizer, rule, extremes, tampering), the per-step schedule of feeds and injected overflows, and
the model, linear in each variable (scripts/fuzz_campaign.py)."""
import numpy as np
import tensorflow as tf

from fuzz_twins import DTYPE_MAX, F32

FRONTENDS = ("npu_graph", "npu_function", "megatron", "grad_scaler", "keras")
TF1 = tf.version.VERSION.startswith("1.")
# TensorFlow 1.15, the device's TF1 stack: the front ends TF1 scripts use there. The v1 graph
# optimizers run in 1.15's default graph mode, as on the device; GradScaler needs eager execution,
# which 1.15 turns on only at a program's start and never off again, so its cases run in a second
# process started with eager execution (see run_elsewhere).
FRONTENDS_TF1 = ("npu_graph", "megatron", "grad_scaler")
EAGER_FRONTENDS_TF1 = ("grad_scaler",)
NOT_ON_TF1 = {"npu_function": "NPULossScaleOptimizer inside a tf.function with TF 2 variables "
                              "(TF1 scripts build v1 graphs: use npu_graph)",
              "keras": "the Keras NpuLossScaleOptimizer needs TensorFlow 2's Keras"}


def available_frontends():
    """The front ends the campaign draws on this TensorFlow."""
    return FRONTENDS_TF1 if TF1 else FRONTENDS
KINDS = ("inf", "nan", "saturated", "register", "cond")
DTYPES = ("float16", "bfloat16", "float32")


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------
def make_case(seed, index, frontends=None, steps=None):
    """The parameters of case ``index`` of campaign ``seed`` (a plain, JSON-able dict), drawn
    among ``frontends`` (default: those of this TensorFlow, ``available_frontends()``)."""
    frontends = tuple(frontends or available_frontends())
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
        # TF 1.15: eager only (GradScaler's documented use there; its tf.function path is not)
        case["traced"] = bool(rng.random() < 0.6) and not TF1
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
