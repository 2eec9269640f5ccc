"""LossScaleHook: see the loss scale, overflows and skipped steps while training runs.

A ``tf.compat.v1.train.SessionRunHook`` for ``MonitoredTrainingSession`` and Estimators. On every
training step it adds a few scalars to the step's own ``session.run`` (no second run): the loss
scale the step used, the step's overflow flag and, from the optimizer's
:attr:`~npu_loss_scale.NPULossScaleOptimizer.step_report`, the scale, skipped-step count and
global step after the step (tensors without side effects); then

* every ``every_n_steps`` training iterations, and on every overflowed (skipped) step, it logs a
  line such as::

      loss scale 65536 | overflow no | skipped steps 30 (+0) | global step 170 | iteration 200 | loss 0.3412
      overflow at iteration 3 (global step 0): step skipped, loss scale 4.29497e+09 -> 2.14748e+09, skipped steps 3

  and, with overflow localisation on (:mod:`npu_loss_scale.device.localisation`), where it came from::

      step 17 skipped: first overflow at bert/encoder/layer_3/attention/Softmax (forward, fp16, 3.1e5), 12 sites | loss scale 65536 -> 32768, skipped steps 4

* it writes TensorBoard scalars (when given ``output_dir`` or ``summary_writer``):
  ``loss_scale/scale``, ``loss_scale/overflow`` (1 = the step overflowed and was skipped),
  ``loss_scale/skipped_steps``, ``loss_scale/global_step``, with ``loss`` ``loss_scale/loss``
  and, with a :class:`~npu_loss_scale.MegatronMixedPrecisionOptimizer`, ``loss_scale/grad_norm``
  and ``loss_scale/num_zeros_in_grad`` (also in the log line: ``grad norm 3 | zeros in grad 1``;
  NaN and -1 on a skipped step); with localisation on, ``loss_scale/overflow_sites`` (sites
  that overflowed in a skipped step) and the text ``loss_scale/first_overflow``.
  Their step axis is the *training iteration* (applied + skipped steps, i.e.
  ``global_step + skipped_steps``), not ``global_step``: a skipped step does not advance
  ``global_step``, so on that axis a run of overflows would collapse onto one point.
* it keeps the per-iteration record in :attr:`history` (a list of dicts).

Tensors come from the optimizer (``optimizer=`` an :class:`~npu_loss_scale.NPULossScaleOptimizer`
whose train op is built) or, without it, from the graph by name: ``loss_scale:0``, the op whose
name ends in ``overflow_status_reduce_all`` and the tensor ``skipped_steps`` (read once when
the session is created; counted from the overflow flag afterwards; the new scale then shows in
the next step's line).

Evaluation and prediction: the overflow status register is sticky until a training step reads
it, as on the device, so an evaluation that overflows would make the next training step skip.
:class:`OverflowStatusClearHook` (for ``evaluation_hooks`` / ``prediction_hooks``, or any
evaluation session) clears it when the evaluation ends; in a script, fetch
:func:`npu_loss_scale.clear_overflow_status` (``after=`` the evaluation tensors) with the
evaluation run.

Example (Estimator ``model_fn``)::

    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    hook = LossScaleHook(optimizer=opt, every_n_steps=100, loss=loss, output_dir=model_dir)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=[hook])
"""

import tensorflow as tf

from npu_loss_scale._internal.report import StepReport
from npu_loss_scale._internal import checks as _checks
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import localisation
from npu_loss_scale.frontends.hook_output import SUMMARY_TAGS, format_scale, status_line, \
    summary
from npu_loss_scale.optimizers.loss_scale import FINITE_OP_NAME
from npu_loss_scale.scaling.managers import LOSS_SCALE_TENSOR_NAME

def _find_by_suffix(graph, suffix):
    """The last op whose name is ``suffix`` or ends with ``/suffix`` (the last train op built)."""
    found = None
    for op in graph.get_operations():
        if op.name == suffix or op.name.endswith("/" + suffix):
            found = op
    return found


class LossScaleHook(tf.compat.v1.train.SessionRunHook):
    """Logs loss scale, overflow flag and skipped steps every N steps and on every overflow.

    Args:
      optimizer: the :class:`~npu_loss_scale.NPULossScaleOptimizer` (its train op must be built
        before the session is created). Optional: without it the tensors are found by name.
      every_n_steps: log a line every this many training iterations (integer >= 1).
      loss: optional loss tensor (or its name) to log and summarise as well.
      output_dir: write TensorBoard scalars there (shares the Estimator's event file when it is
        the model_dir). ``summary_writer`` may be given instead.
      summary_every_n_steps: write scalars every this many iterations (default: every
        iteration); overflowed iterations are always written.
      log_overflows: also log a line for each overflowed (skipped) step (default True).
      log_fn: callable taking one string; default ``tf.compat.v1.logging.info``.
      summary_writer: a ``tf.compat.v1.summary.FileWriter`` to use instead of ``output_dir``.

    After a run, :attr:`history` holds one :class:`~npu_loss_scale.StepReport` (a dict) per
    iteration: ``iteration``, ``global_step``, ``loss_scale`` (the scale the step used),
    ``overflow`` (bool, None without an overflow check), ``skipped_steps``, ``loss`` and
    ``overflow_record`` (the step's
    :class:`~npu_loss_scale.device.localisation.StepOverflowRecord` when localisation is on and the step
    overflowed, else None); :attr:`step_report` is the last of them, :attr:`skipped_steps` the
    latest count.
    """

    def __init__(self, optimizer=None, every_n_steps=100, loss=None, output_dir=None,
                 summary_every_n_steps=1, log_overflows=True, log_fn=None, summary_writer=None):
        self._optimizer = optimizer
        self._every_n = _checks.positive_int("every_n_steps", every_n_steps)
        self._summary_every_n = _checks.positive_int("summary_every_n_steps", summary_every_n_steps)
        self._loss_arg = loss
        self._output_dir = output_dir
        self._writer = summary_writer
        self._log_overflows = bool(log_overflows)
        self._log_fn = _checks.callable_or_none("log_fn", log_fn,
                                                "a callable taking the message string")
        self.history = []
        self.skipped_steps = None
        self._tensors = None
        self._seen_record = None

    @property
    def step_report(self):
        """The last iteration's :class:`~npu_loss_scale.StepReport` (``history[-1]``)."""
        if not self.history:
            raise ValueError("the LossScaleHook has recorded no step yet: its step_report "
                             "exists after the first run of the train op")
        return self.history[-1]

    # -- tensor lookup ----------------------------------------------------------------------
    def _resolve(self, graph):
        opt = self._optimizer
        tensors = {"next_loss_scale": None, "skipped_after": None, "global_step_after": None}
        if opt is not None:
            tensors["loss_scale"] = opt.loss_scale
            tensors["skipped_steps"] = opt.skipped_steps
            try:
                report = opt.step_report
            except RuntimeError:
                report = None
            if report is not None:
                tensors["loss_scale"] = report["loss_scale"]
                tensors["finite"] = report.get("finite")
                tensors["next_loss_scale"] = report.get("next_loss_scale")
                tensors["skipped_after"] = report["skipped_steps"]
                tensors["global_step_after"] = report.get("global_step")
            else:
                tensors["finite"] = None
            for key in ("grad_norm", "num_zeros_in_grad"):      # MegatronMixedPrecisionOptimizer
                try:
                    tensors[key] = getattr(opt, key, None)
                except RuntimeError:
                    tensors[key] = None
        else:
            try:
                tensors["loss_scale"] = graph.get_tensor_by_name(LOSS_SCALE_TENSOR_NAME + ":0")
            except KeyError:
                raise ValueError("LossScaleHook found no tensor 'loss_scale:0' in the graph: pass "
                                 "optimizer= (an NPULossScaleOptimizer) or build the loss-scale "
                                 "manager in this graph")
            finite_op = _find_by_suffix(graph, FINITE_OP_NAME)
            tensors["finite"] = finite_op.outputs[0] if finite_op is not None else None
            skipped = _find_by_suffix(graph, "skipped_steps")
            tensors["skipped_steps"] = skipped.outputs[0] if skipped is not None else None
        if tensors["loss_scale"].dtype != tf.float32:
            raise TypeError("the loss scale tensor must be float32; got %s (a resource handle "
                            "instead of the value?)" % tensors["loss_scale"].dtype.name)
        loss = self._loss_arg
        if isinstance(loss, str):
            loss = graph.get_tensor_by_name(loss if ":" in loss else loss + ":0")
        tensors["loss"] = loss
        tensors["global_step"] = tf.compat.v1.train.get_global_step(graph)
        return tensors

    # -- SessionRunHook ---------------------------------------------------------------------
    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        self._tensors = self._resolve(graph)
        skipped = self._tensors["skipped_steps"]
        step = self._tensors["global_step"]
        # Read once when the session is created; afterwards each step's own run reports them.
        self._post = {"loss_scale": self._tensors["loss_scale"]}
        if skipped is not None:
            self._post["skipped_steps"] = tf.convert_to_tensor(skipped)
        if step is not None:
            self._post["global_step"] = tf.convert_to_tensor(step)
        if self._writer is None and self._output_dir is not None:
            self._writer = tf.compat.v1.summary.FileWriterCache.get(self._output_dir)

    def after_create_session(self, session, coord):  # pylint: disable=unused-argument
        state = session.run(self._post)
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self._last_scale = float(state["loss_scale"])
        self._global_step = int(state["global_step"]) if "global_step" in state else None
        self._iteration = (self._global_step or 0) + self.skipped_steps
        self._interval_skipped = 0

    def before_run(self, run_context):  # pylint: disable=unused-argument
        fetches = {"loss_scale": self._tensors["loss_scale"]}
        for key in ("finite", "loss", "next_loss_scale", "skipped_after", "global_step_after",
                    "grad_norm", "num_zeros_in_grad"):
            if self._tensors.get(key) is not None:
                fetches[key] = self._tensors[key]
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):  # pylint: disable=unused-argument
        results = run_values.results
        self._iteration += 1
        used_scale = float(results["loss_scale"])
        overflow = None if "finite" not in results else not bool(results["finite"])
        loss = float(results["loss"]) if "loss" in results else None
        if overflow:
            self._interval_skipped += 1
        due_log = self._iteration % self._every_n == 0
        due_summary = self._writer is not None and (
            overflow or self._iteration % self._summary_every_n == 0)
        new_scale = float(results.get("next_loss_scale", used_scale))
        if "skipped_after" in results:
            self.skipped_steps = int(results["skipped_after"])
        elif overflow:
            self.skipped_steps = (self.skipped_steps or 0) + 1
        if "global_step_after" in results:
            self._global_step = int(results["global_step_after"])
        elif self._global_step is not None and overflow is not None and not overflow:
            self._global_step += 1
        global_step = self._global_step
        record = StepReport({"iteration": self._iteration, "global_step": global_step,
                  "loss_scale": used_scale, "overflow": overflow,
                  "skipped_steps": self.skipped_steps, "loss": loss,
                  "grad_norm": float(results["grad_norm"]) if "grad_norm" in results else None,
                  "num_zeros_in_grad": (int(results["num_zeros_in_grad"])
                                        if "num_zeros_in_grad" in results else None),
                  "overflow_record": self._new_overflow_record() if overflow else None})
        self.history.append(record)
        located = record["overflow_record"]
        if located is not None and self._log_overflows:
            self._log("step %d skipped: %s | loss scale %s -> %s, skipped steps %d" % (
                self._iteration, located.summary(), format_scale(used_scale),
                format_scale(new_scale), self.skipped_steps))
        elif overflow and self._log_overflows:
            self._log("overflow at iteration %d (global step %s): step skipped, loss scale %s -> %s,"
                      " skipped steps %d" % (self._iteration, global_step,
                                             format_scale(used_scale), format_scale(new_scale),
                                             self.skipped_steps))
        if due_log:
            self._log(status_line(record, new_scale, self._interval_skipped))
            self._interval_skipped = 0
        if due_summary:
            self._writer.add_summary(summary(record), record["iteration"])
        self._last_scale = new_scale

    def end(self, session):  # pylint: disable=unused-argument
        if self._writer is not None:
            self._writer.flush()
        if self.history:
            total = len(self.history)
            skipped = self.skipped_steps or 0
            self._log("training ended: %d iterations, %d skipped steps in total (%.1f%% of "
                      "this session's), loss scale now %s"
                      % (total, skipped, 100.0 * sum(1 for h in self.history if h["overflow"])
                         / total, format_scale(self._last_scale)))

    def _new_overflow_record(self):
        """The localisation record of the step just run (None when localisation is off: a record
        left by an earlier localised graph of the process is not this step's)."""
        if not localisation.enabled():
            return None
        located = localisation.last_record()
        if located is None or located is self._seen_record \
                or located.step != localisation.steps_seen():
            return None   # none, or one of an earlier step
        self._seen_record = located
        located.skipped = True   # this hook saw the step skipped
        return located

    # -- output -----------------------------------------------------------------------------
    def _log(self, message):
        if self._log_fn is not None:
            self._log_fn(message)
        else:
            tf.compat.v1.logging.info(message)


class OverflowStatusClearHook(tf.compat.v1.train.SessionRunHook):
    """Clears the overflow status register when an evaluation or prediction session ends.

    The register is sticky until a training step reads it (as on the device): an evaluation
    that overflows would otherwise make the next training step skip. Give this hook to the
    evaluation and prediction paths (an Estimator's ``evaluation_hooks`` and
    ``prediction_hooks``, or a ``MonitoredSession`` that evaluates); it runs one clear in
    ``end()``, after the last evaluation step, and nothing per step.

    Args:
      backend: the detection backend whose register to clear (default: the one in force, see
        :func:`npu_loss_scale.get_backend_name`).

    Example::

        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics,
                                          evaluation_hooks=[OverflowStatusClearHook()])
    """

    def __init__(self, backend=None):
        self._backend = detection.get_backend_name(backend)
        self._clear = None

    def begin(self):
        self._clear = detection.clear_overflow_status(self._backend)

    def end(self, session):
        if self._clear is not None:
            session.run(self._clear)


__all__ = ["LossScaleHook", "OverflowStatusClearHook", "SUMMARY_TAGS"]
