"""``NpuLossScaleOptimizer`` on Keras 3 (:mod:`npu_loss_scale.frontends.keras` builds it on first
use): Keras's ``LossScaleOptimizer`` deciding with the package's detection, Keras 2's growth rule
(held at the largest finite scale), and its three state variables restored from a
``tf.train.Checkpoint`` all or nothing."""
import sys

import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import staged as _staged
from npu_loss_scale.detection.step import OverflowCheck
from npu_loss_scale.frontends._keras_shared import NpuProperties, check_args, keras_rule, \
    state_check

__all__ = ["build"]

#: Keras 3's loss-scale state: Keras's scale and counter, and the package's verdict.
_STATE = ("dynamic_scale", "step_counter", "last_step_finite")
#: Their shapes and dtypes (Keras 3's "int" is int64 on TensorFlow).
_ACCEPTED = {"dynamic_scale": ((), "float32"), "step_counter": ((), "int64"),
             "last_step_finite": ((), "bool")}


def build(doc, module):
    """The class, its docstring ``doc``, shown as defined in ``module``."""
    base = tf.keras.optimizers.LossScaleOptimizer
    keras_ops = sys.modules[base.__module__].ops

    class NpuLossScaleOptimizer(NpuProperties, base):  # pylint: disable=abstract-method
        __doc__ = doc

        def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                     dynamic_growth_steps=None, *, backend=None, is_distributed=False,
                     agreement=None, name=None, **kwargs):
            if not isinstance(inner_optimizer, tf.keras.optimizers.Optimizer):
                raise TypeError("inner_optimizer must be a Keras optimizer (for example "
                                "tf.keras.optimizers.Adam()); got %r (type %s)"
                                % (inner_optimizer, type(inner_optimizer).__name__))
            scale, steps = check_args(dynamic, initial_scale, dynamic_growth_steps)
            _checks.boolean("is_distributed", is_distributed)
            super().__init__(inner_optimizer, initial_scale=scale, dynamic_growth_steps=steps,
                             name=name, **kwargs)
            self._npu_dynamic = dynamic
            if not dynamic:
                self.dynamic_growth_steps = None   # as Keras 2 reports a fixed scale
            self._npu_check = OverflowCheck(backend, is_distributed, agreement)
            self.last_step_finite = None
            # Set outside Keras's tracking: neither is a checkpoint child of its own.
            self.__dict__["_npu_staged"] = None
            self.__dict__["_npu_variables_list"] = _staged.StagedList(
                lambda: self._variables, lambda: self.__dict__.get("_npu_staged"),
                before_lookup=self._npu_refuse_pending)

        def build(self, var_list):
            self._npu_refuse_pending()
            self.__dict__["_npu_building"] = True
            try:
                self.last_step_finite = self.add_variable(
                    shape=(), dtype="bool", initializer="ones", aggregation="none",
                    name="last_step_finite")
                super().build(var_list)
            finally:
                self.__dict__["_npu_building"] = False
            self._npu_stage_state()

        # -- tf.train.Checkpoint restores of the loss-scale state, all or nothing ------------
        # Keras tracks each of its optimizer variables twice: by name and as an entry of
        # `_variables`. Both references lead to one stand-in per state variable (one checkpoint
        # key, restored once into the staging of _staged.StagedState), so a refused value
        # leaves all three as they were.
        def _npu_refuse_pending(self):
            """A checkpoint read before the build and holding a value that does not fit is
            refused before anything is made: when the restore reaches the list of variables
            (so ``read`` raises), else when the optimizer is built (``model.fit`` builds it
            inside its first traced step)."""
            if self.built:
                return
            _staged.refuse_pending(
                "NpuLossScaleOptimizer",
                [(self, {name: name for name in _STATE}),
                 (self.__dict__["_npu_variables_list"], {})], _ACCEPTED)

        def _npu_stage_state(self):
            """After the build: the staging of the three variables, and what a checkpoint read
            before the build holds for them restored into it."""
            tracked = {name: getattr(self, name) for name in _STATE}
            values = {name: getattr(var, "_value", None) for name, var in tracked.items()}
            listing = self.__dict__["_npu_variables_list"]
            if any(value is None for value in values.values()):
                # not initialized yet (Keras defers it in a stateless scope): restored as Keras
                # restores it, one variable at a time
                for name, var in tracked.items():
                    self._handle_deferred_dependencies(name, var)
            else:
                staged = _staged.StagedState("NpuLossScaleOptimizer", values, tracked)
                self.__dict__["_npu_staged"] = staged
                staged.restore_deferred([(self, {name: name for name in _STATE}),
                                         (listing, listing.state_indices())])
            listing.restore_deferred_entries()

        def _handle_deferred_dependencies(self, name, trackable):
            if name in _STATE and self.__dict__.get("_npu_building"):
                return   # restored once all three exist, by _npu_stage_state
            super()._handle_deferred_dependencies(name, trackable)

        def _trackable_children(self, save_type="checkpoint", **kwargs):
            children = dict(super()._trackable_children(save_type, **kwargs))
            staged = self.__dict__.get("_npu_staged")
            if save_type == "checkpoint" and staged is not None:
                children.update(staged.children)
                children["_variables"] = self.__dict__["_npu_variables_list"]
            return children

        def _lookup_dependency(self, name, cached_dependencies=None):
            if name == "_variables" and "_npu_variables_list" in self.__dict__:
                return self.__dict__["_npu_variables_list"]
            staged = self.__dict__.get("_npu_staged")
            if staged is not None and name in staged.children:
                staged.expect(name, getattr(self, "_self_update_uid", None))
                return staged.children[name]
            return super()._lookup_dependency(name, cached_dependencies)

        @property
        def loss_scale(self):
            """The current loss scale (float32 scalar)."""
            if not self.built:
                return tf.constant(self._npu_unbuilt_scale(), tf.float32)
            return tf.convert_to_tensor(self.dynamic_scale.value)

        def scale_loss(self, loss):
            """``loss`` times the loss scale. Before the build (a custom loop's first step),
            the scale a checkpoint restored into this optimizer holds, else ``initial_scale``:
            Keras's own takes ``initial_scale`` there, so the first step after a restore
            unscales its gradients by another scale than its loss was scaled by."""
            if self.built:
                return super().scale_loss(loss)
            return keras_ops.multiply(loss, self._npu_unbuilt_scale())

        def _npu_unbuilt_scale(self):
            """Before the build: the scale a pending checkpoint restore holds (refused now if it
            does not fit), else ``initial_scale``."""
            self._npu_refuse_pending()
            value = _staged.pending_value([(self, {"dynamic_scale": "dynamic_scale"})],
                                          "dynamic_scale")
            return self.initial_scale if value is None else float(value)

        def check_finite(self, grads):
            # Keras 3 checks the still-scaled gradients: the emulation's ±MAX test applies too.
            # First of the step: a restored impossible scale or counter is refused.
            check = state_check("dynamic_scale", self.dynamic_scale, "step_counter",
                                 self.step_counter)
            step = self._npu_check.start()
            register = step.end(step.read([g for g in grads if g is not None]))
            bad = step.count_overflowed(list(grads))
            found = tf.cast(bad + register > 0, tf.float32)
            # Under a tf.distribute strategy Keras calls this once per replica and keeps the
            # first replica's answer; each replica (device) has its own register, so the flag is
            # summed over the replicas first, then over ranks.
            if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
                found = tf.distribute.get_replica_context().all_reduce(
                    tf.distribute.ReduceOp.SUM, found)
            found = step.agree(found)
            with tf.control_dependencies([check]):
                finite = tf.equal(found, 0.0)
            self.last_step_finite.assign(finite)
            return finite

        def _stateful_handle_finite_grads(self, grads, trainable_variables):
            scale = self.dynamic_scale
            variables = trainable_variables or self._trainable_variables
            as_is = getattr(self, "_overwrite_variable_with_gradient", lambda variable: False)
            unscaled = [g if g is None or as_is(v) else keras_ops.divide(g, scale)
                        for g, v in zip(grads, variables)]
            self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)
            if self._npu_dynamic:
                self._count_finite_step()

        def _count_finite_step(self):
            """One finite step of Keras's rule
            (:func:`~npu_loss_scale.frontends._keras_shared.keras_rule`): a growth held at the
            largest finite scale (Keras 3's own class doubles it to inf, then skips every step
            for ever); a counter at or past the growth point grows too."""
            scale, count = keras_rule(self.dynamic_scale, self.step_counter, True,
                                       self.dynamic_growth_steps)
            self.dynamic_scale.assign(scale)
            self.step_counter.assign(count)

        def _stateful_handle_non_finite_grads(self):
            if not self._npu_dynamic:
                self.step_counter.assign(0)     # a fixed scale: only the count restarts
                return
            scale, count = keras_rule(self.dynamic_scale, self.step_counter, False,
                                       self.dynamic_growth_steps)
            self.dynamic_scale.assign(scale)
            self.step_counter.assign(count)

        def get_config(self):
            config = super().get_config()
            config["dynamic"] = self._npu_dynamic
            return config

    NpuLossScaleOptimizer.__module__ = module
    return NpuLossScaleOptimizer
