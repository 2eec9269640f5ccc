"""The fuzz campaign's eager and tf.function front ends: NPULossScaleOptimizer in a tf.function,
GradScaler (eager or traced) and the Keras NpuLossScaleOptimizer (scripts/fuzz_campaign.py)."""
import numpy as np
import tensorflow as tf

from fuzz_cases import TF1, build_loss, feed_tensors, initial_values
from fuzz_checks import same_bits
from fuzz_runners import Runner, make_manager, slot_names, v1_optimizer

class EagerV1Runner(Runner):
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
            for slot in slot_names(self.case):
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
        """A tf.train.Checkpoint of everything a training script would save (TF 1.15's takes no
        list: there the variables are named one by one)."""
        variables = (dict(zip(self.model_names(), self.variables)) if TF1
                     else {"variables": list(self.variables)})
        return tf.train.Checkpoint(global_step=self.global_step, **variables,
                                   **self.checkpointed())

    def checkpointed(self):
        raise NotImplementedError

    def save(self, prefix):
        return self.checkpoint().write(prefix)

    def restore(self, prefix):
        checkpoint = self.checkpoint()      # TF 1.15's (CheckpointV1) has restore, not read
        (checkpoint.restore if TF1 else checkpoint.read)(prefix).expect_partial()


class NpuFunctionRunner(EagerV1Runner):
    """NPULossScaleOptimizer inside a tf.function (TF2 variables, eager state)."""

    def __init__(self, nls, case, tally, verbose):
        super().__init__(nls, case, tally, verbose)
        variables = self.variables
        self.manager = make_manager(nls, case["rule"])
        self.opt = nls.NPULossScaleOptimizer(v1_optimizer(case), self.manager,
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


class GradScalerRunner(EagerV1Runner):
    """nls.GradScaler, eager or in a tf.function, with a tf.compat.v1.train optimizer."""

    def __init__(self, nls, case, tally, verbose):
        super().__init__(nls, case, tally, verbose)
        rule = case["rule"]
        self.scaler = nls.GradScaler(rule["init"], rule["growth_factor"], rule["backoff_factor"],
                                     rule["growth_interval"], backend="emulation")
        self.opt = v1_optimizer(case)
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
            if name in now and not same_bits(value, now[name]):
                self.tally.fail(case, item["step"], "%s changed by a refused step" % name)
        return now

    def counters(self):
        return {"global_step": (self.global_step.numpy(), self.applied)}

    def scale_state(self):
        sd = self.scaler.state_dict()
        return {"scale": float(sd["scale"]), "growth_tracker": int(sd["_growth_tracker"])}


class KerasRunner(Runner):
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
