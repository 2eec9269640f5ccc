"""What ``NPULossScaleOptimizer.apply_gradients`` does once the gradients exist: one step's read
of the overflow status and its agreement over the ranks, the skip decision (written once, in
:meth:`SkipOrApply._skip_or_apply`, for accumulation too), the manager's update, the skipped
count, the stuck-scale warning, the step report and the summaries.

:class:`SkipOrApply` is a base of :class:`~npu_loss_scale.optimizers.loss_scale.NPULossScaleOptimizer`
and works on its attributes (``_manager``, ``_overflow``, ``_optimizer``, ``_check_overflow``,
``_accumulation_steps``, ``_summaries``, its per-graph ``_state()``). The graph names scripts
fetch by are written here: the verdict ``overflow_status_reduce_all`` and the summaries' scope.
"""
import warnings

import tensorflow as tf

from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal.compat.variables import snapshot
from npu_loss_scale._internal.messages import LossScaleStuckWarning, OverflowInvisibleWarning, warn_when_run
from npu_loss_scale.device import register as emulation
from npu_loss_scale.optimizers import _accumulation

__all__ = ["SkipOrApply", "FINITE_OP_NAME", "SUMMARY_SCOPE"]

FINITE_OP_NAME = "overflow_status_reduce_all"
SUMMARY_SCOPE = "npu_loss_scale"


class SkipOrApply:
    """The apply path of :class:`~npu_loss_scale.optimizers.loss_scale.NPULossScaleOptimizer`
    (a base class of it; it holds no state of its own)."""

    def _prepare_inner(self, grads_and_vars):
        """Creates the inner optimizers' slots now, in the outermost graph.

        TensorFlow's optimizers create them under ``tf.init_scope`` inside ``apply_gradients``;
        inside the ``tf.cond`` around the inner apply that lands in eager mode when eager
        execution was turned off inside ``main`` (``absl.app.run``), and the train op fails to
        build. Slots that exist already are not created again.
        """
        var_list = [v for g, v in grads_and_vars if g is not None]
        opt, seen = self._optimizer, set()
        with _graphs.outer_scope(_graphs.outermost_graph()):
            while isinstance(opt, tf.compat.v1.train.Optimizer) and id(opt) not in seen:
                seen.add(id(opt))
                opt._create_slots(var_list)  # pylint: disable=protected-access
                opt = opt.__dict__.get("_optimizer")

    def _warn_if_blind(self):
        if self._overflow.backend_name != "inf_nan" or not self._check_overflow:
            return
        if emulation.is_inf_nan_enabled() or emulation._device_plugin() is not None:  # pylint: disable=protected-access
            return
        graph = _graphs.outermost_graph()
        uses_saturation = bool(emulation._state_of(graph).registers)  # pylint: disable=protected-access
        from npu_loss_scale.device import saturation  # pylint: disable=import-outside-toplevel
        if uses_saturation or saturation.every_op_active():
            warnings.warn(
                "npu_loss_scale: backend='inf_nan' cannot see the overflows of emulated "
                "saturation: saturate() turns them into finite +-MAX values and only the "
                "register records them, so overflowed steps would be applied. Use "
                "backend='emulation', or set_device_sat_mode(1) for IEEE arithmetic.",
                OverflowInvisibleWarning, stacklevel=3)

    def _read_and_agree(self, step, distribution, grads_and_vars, observed):
        """(status agreed across replicas and ranks, ops that clear what was read): ``step``'s
        read (with the marks of ``compute_gradients`` when ``observed``) and agreement."""
        status = step.read_replicas(distribution, grads_and_vars, observed)
        return step.agree_status(status), step.end_ops

    def _bookkeeping(self, state, finite, global_step, before):
        """Manager update, skipped count, stuck warning, report. Returns (ops, report)."""
        scale = tf.identity(self._manager.get_loss_scale(), name="loss_scale_used")
        skipped = state["skipped_steps"]
        skipped_before = skipped.read()
        gs_before = None
        if global_step is not None:
            with tf.control_dependencies(None):
                gs_before = snapshot(global_step)
            before.append(gs_before)
        with tf.control_dependencies([scale]):
            next_scale = self._manager.next_loss_scale(finite)
        with tf.control_dependencies([scale, skipped_before]
                                     + ([next_scale] if next_scale is not None else [])):
            update_scale = self._serialized_update(finite)
            overflowed = tf.logical_not(finite)
            count = skipped.add(tf.cast(overflowed, tf.int64))
        before.extend([scale, skipped_before])
        skipped_after = skipped_before + tf.cast(overflowed, tf.int64)
        if getattr(self._manager, "warns_when_stuck", False):
            stuck = tf.constant(False)        # the manager's update() warns (once per step)
        else:
            stuck = tf.cond(tf.logical_and(overflowed, scale <= 1.0),
                            lambda: self._warn_stuck(scale), lambda: tf.constant(False))
        report = {"loss_scale": scale, "next_loss_scale": next_scale,
                  "finite": finite if self._check_overflow else None,
                  "skipped_steps": skipped_after,
                  "global_step": None if gs_before is None
                  else gs_before + tf.cast(finite, gs_before.dtype)}
        return [update_scale, count, stuck], report

    def _serialized_update(self, finite):
        """``manager.update_loss_scale(finite)``, one at a time per manager and graph.

        A manager shared by two optimizers whose train ops run in one ``session.run`` (a GAN) is
        updated by both; a critical section keeps the two read-modify-write updates from
        interleaving, so the manager moves exactly once per ``apply_gradients``.
        """
        if tf.distribute.has_strategy():
            return self._manager.update_loss_scale(finite)
        manager_state = self._manager._state()  # pylint: disable=protected-access
        section = manager_state.get("_update_section")
        if section is None:
            with _graphs.outer_scope(_graphs.outermost_graph()):
                section = tf.CriticalSection(name="loss_scale_update")
            manager_state["_update_section"] = section

        def update():
            op = self._manager.update_loss_scale(finite)
            with tf.control_dependencies([op]):
                return tf.constant(True)

        # TensorFlow records each execution in the graph's collection "critical_section_executions"
        # so that another critical section cannot take exclusive access to the same resources.
        # A MetaGraph cannot hold those records: every Saver or Estimator checkpoint of a TF1
        # graph logged "Issue encountered when serializing critical_section_executions". The
        # section guards the manager's own variables, which no other section locks; its record
        # is taken out again.
        executions = tf.compat.v1.get_default_graph().get_collection_ref(
            "critical_section_executions")
        before = len(executions)
        done = section.execute(update, exclusive_resource_access=False)
        del executions[before:]
        return done

    def _distributed_apply(self, distribution, grads_and_vars, global_step=None, name=None):
        """Cross-replica part of apply_gradients (reached through merge_call, as in TensorFlow)."""
        name = name if name is not None else self.get_name()
        state = self._state()
        self._prepare_inner(grads_and_vars)
        self._warn_if_blind()
        step = self._overflow.start(state["reader"])   # this step's one detection protocol
        if self._accumulation_steps > 1:
            finite, report = _accumulation.accumulating_apply(
                self, step, distribution, grads_and_vars, global_step, name, state)
            finite = tf.identity(finite, name=FINITE_OP_NAME)
            report["finite"] = finite if self._check_overflow else None
            state["finite"] = finite
            ops = [finite]
        else:
            status, end_ops = self._read_and_agree(step, distribution, grads_and_vars, True)
            finite = tf.reduce_all(tf.equal(status, 0.0), name=FINITE_OP_NAME)
            state["finite"] = finite
            maybe_apply, ops, report = self._skip_or_apply(
                distribution, finite, grads_and_vars, global_step, name, state)
            ops = [maybe_apply] + ops + end_ops
        state["report"] = report
        if self._summaries:
            self._add_summaries(report["loss_scale"], report["skipped_steps"],
                                tf.logical_not(finite))
        return tf.group(*ops, name=name)

    def _skip_or_apply(self, distribution, finite, grads_and_vars, global_step, name, state):
        """The skip decision, the one place it is written: the manager update and the skipped
        count always run; the inner optimizer applies ``grads_and_vars`` only when ``finite``.

        Returns (the conditional apply, the bookkeeping ops, the step report).
        """
        before = []
        ops, report = self._bookkeeping(state, finite, global_step, before)

        def apply_fn():
            # The dependencies again inside the branch: a v1 cond does not hold the ops in its
            # branches to the dependencies around it, and TF 1.15's reference-variable
            # global_step would otherwise be read for the report after the branch advanced it.
            with tf.control_dependencies(before):
                return self._apply_gradients(distribution, grads_and_vars, global_step,
                                             name + "-wrapped")

        with tf.control_dependencies(before):
            maybe_apply = tf.cond(finite, apply_fn, tf.no_op)
        return maybe_apply, ops, report

    @staticmethod
    def _warn_stuck(scale):
        return warn_when_run(
            LossScaleStuckWarning, "npu_loss_scale: gradients overflowed at loss scale %g - the "
            "scale cannot go lower, the step is skipped. The model itself overflows: check its "
            "fp16 ranges.", [scale], name="warn_stuck_at_min_scale")

    @staticmethod
    def _add_summaries(scale, skipped, overflowed):
        # Tags: npu_loss_scale/loss_scale, npu_loss_scale/skipped_steps, npu_loss_scale/overflow
        with tf.name_scope(SUMMARY_SCOPE + "/"):
            tf.compat.v1.summary.scalar("loss_scale", scale)
            tf.compat.v1.summary.scalar("skipped_steps", skipped)
            tf.compat.v1.summary.scalar("overflow", tf.cast(overflowed, tf.float32))
