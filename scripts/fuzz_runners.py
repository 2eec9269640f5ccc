"""The fuzz campaign's runner of one case (the schedule, the twin, the reference, the checks) and
its v1 graph front ends in a Session (scripts/fuzz_campaign.py)."""
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from fuzz_cases import build_loss, feed_tensors, initial_values, make_schedule
from fuzz_checkpoints import short_name, tamper_checkpoint
from fuzz_checks import (Reference, check_step, clip_factor, densify, kernels_flush_subnormals,
                         natural_overflow, same_bits, unscale_factors, unscaled_grads)
from fuzz_twins import (F32, AscendExponentialTwin, FixedTwin, KerasTwin, MegatronDynamicTwin,
                        TorchScalerTwin)

# ---------------------------------------------------------------------------------------------
# Front ends
# ---------------------------------------------------------------------------------------------
def v1_optimizer(case):
    lr = case["lr"]
    if case["optimizer"] == "sgd":
        return tf.compat.v1.train.GradientDescentOptimizer(lr)
    if case["optimizer"] == "momentum":
        return tf.compat.v1.train.MomentumOptimizer(lr, case["momentum"])
    return tf.compat.v1.train.AdamOptimizer(lr, beta1=0.9, beta2=0.999, epsilon=1e-8)


def make_twin(rule):
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


def make_manager(nls, rule):
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


def slot_names(case):
    return {"sgd": [], "momentum": ["momentum"], "adam": ["m", "v"]}.get(case["optimizer"], [])


class Runner:
    """Drives one case: the schedule, the twin, the reference, the checks."""

    def __init__(self, nls, case, tally, verbose):
        self.nls, self.case, self.tally, self.verbose = nls, case, tally, verbose
        self.twin = make_twin(case["rule"])
        self.reference = Reference(case)
        self.flush = kernels_flush_subnormals()   # in the mode this runner executes in
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
                micro_grads.append(unscaled_grads(case, feed, scale, unscale_factors(scale),
                                                  self.flush))
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
                if short_name(key) not in message:
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
            if name in restored and not same_bits(value, restored[name]):
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


class NpuGraphRunner(Runner):
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
        manager = make_manager(nls, case["rule"])
        self.manager = manager
        if case["frontend"] == "megatron":
            self.opt = nls.MegatronMixedPrecisionOptimizer(
                v1_optimizer(case), manager, clip_grad=case["clip"],
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
                inner = v1_optimizer(case)
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
            for slot in slot_names(case):
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
