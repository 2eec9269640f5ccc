"""NPULossScaleOptimizer: Ascend loss scaling on TensorFlow's own loss-scale optimizer.

The class, its state and its gradients (scaled, checked, unscaled) are here; what
``apply_gradients`` does with them (read and agree, the skip decision, the bookkeeping) is
:mod:`npu_loss_scale.optimizers._skip_or_apply`, whose graph names (``FINITE_OP_NAME``,
``SUMMARY_SCOPE``) this module exports.
"""
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.detection.step import OverflowCheck
from npu_loss_scale._internal.compat import tracking
# the two warnings a step can raise, importable from here as before the apply path moved
from npu_loss_scale._internal.messages import LossScaleStuckWarning, OverflowInvisibleWarning  # noqa: F401
from npu_loss_scale._internal.compat.loss_scale_optimizer import LossScaleOptimizerBase
from npu_loss_scale._internal.compat.variables import Variable
from npu_loss_scale._internal.counter import Counter
from npu_loss_scale._internal.report import StepReport
from npu_loss_scale.optimizers._skip_or_apply import FINITE_OP_NAME, SUMMARY_SCOPE, SkipOrApply
from npu_loss_scale.scaling.unscale import Reciprocal, unscale_gradient
from npu_loss_scale.scaling.base import as_manager

__all__ = ["NPULossScaleOptimizer", "FINITE_OP_NAME", "SUMMARY_SCOPE"]


class NPULossScaleOptimizer(tracking.ExtraChildren, SkipOrApply, LossScaleOptimizerBase):
    """Wraps a ``tf.compat.v1.train`` optimizer with Ascend-style loss scaling.

    What one training step does (``minimize`` = ``compute_gradients`` + ``apply_gradients``):

    1. The loss is multiplied by the manager's loss scale, the inner optimizer computes the
       gradients of the scaled loss, and every non-None gradient (dense or ``IndexedSlices``) is
       multiplied by ``1 / loss_scale`` (as two normal float32 factors above ``2**126``, where
       the reciprocal itself would flush to zero: see :mod:`npu_loss_scale.scaling.unscale`):
       gradients come back unscaled. Nothing is cleared here.
    2. After every gradient exists, the overflow status is read, then cleared: from the
       device's float-status register (``npu`` backend), its CPU emulation (``emulation``) or an
       IEEE inf/NaN test (``inf_nan``). The register is sticky from one read to the next, across
       ``session.run`` calls, as on the device: an overflow anywhere since the previous read
       (forward or backward pass, earlier micro-batches, cond and loop bodies) makes this step
       skip. Evaluation runs that may overflow clear it themselves
       (:func:`npu_loss_scale.clear_overflow_status`, or ``LossScaleHook(mode="eval")``). With
       ``is_distributed=True`` the status is summed over all ranks first (one collective), so
       every rank takes the same decision. The step is *finite* when the status is all zeros;
       that boolean is the tensor :attr:`overflow_status_reduce_all`.
    3. Finite step: the inner optimizer applies the gradients (and advances ``global_step``).
       Overflowed step: nothing is applied, ``global_step`` stays, :attr:`skipped_steps` grows
       by one. In both cases ``loss_scale_manager.update_loss_scale(finite)`` runs, once.

    Gradient accumulation: with ``accumulation_steps=N`` each run of the train op adds the
    micro-batch's unscaled gradients to float32 accumulators; every N-th run decides once, from
    the register (sticky over the N micro-batches) and an inf/NaN test of the accumulators, and
    applies the mean of the N micro-batch gradients, advances ``global_step`` once, updates the
    manager once and agrees across ranks with one collective; then the accumulators restart.
    On the other runs :attr:`overflow_status_reduce_all` reads True (no decision was taken).

    Two optimizers in one train op (a GAN): each reads the overflow status after its own
    gradients, and sees every overflow since its own previous read (on the ``emulation``
    backend each optimizer has a slot of the register of its own; the device has one register:
    there, run the two train ops in separate ``session.run`` calls). A manager shared by both
    moves once per ``apply_gradients``, i.e. twice per step, as on the device.

    A :class:`FixedLossScaleManager` with ``enable_overflow_check=False`` turns steps 2-3 off:
    every step is applied, as with a plain optimizer.

    Example::

        import npu_loss_scale as nls
        opt = tf.compat.v1.train.AdamOptimizer(1e-3)
        mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=2**32, incr_every_n_steps=1000,
                                                    decr_every_n_nan_or_inf=2, decr_ratio=0.5)
        opt = nls.NPULossScaleOptimizer(opt, mgr)
        train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())

    Args:
      opt: the optimizer to wrap, an instance of ``tf.compat.v1.train.Optimizer``.
      loss_scale_manager: a :class:`LossScaleManager`, or any object with ``get_loss_scale()``
        and ``update_loss_scale(finite_grads)`` (a manager written for contrib or Ascend's
        adapter): its ``update_loss_scale`` is called once per step, inside the train op.
      is_distributed: sum the overflow status across ranks before deciding (Horovod, HCCL or a
        ``tf.distribute`` strategy; see :mod:`npu_loss_scale.agreement`).
      backend: overflow detection backend, ``"npu"``, ``"emulation"`` or ``"inf_nan"``; default:
        ``$NPU_LOSS_SCALE_BACKEND``, else ``npu`` when npu_bridge imports, else ``emulation``.
      agreement: with ``is_distributed``, how ranks agree: ``"strategy"``, ``"hccl"``,
        ``"horovod"``, ``"collective"`` or an :class:`npu_loss_scale.agreement.Agreement`
        instance; default: discovered (see :mod:`npu_loss_scale.agreement` and
        docs/distributed.md). With ``is_distributed=False`` in a run that looks multi-rank, a
        :class:`~npu_loss_scale.agreement.RanksMayDivergeWarning` is issued once.
      summaries: add ``tf.compat.v1.summary`` scalars ``loss_scale``, ``skipped_steps`` and
        ``overflow`` when the train op is built.
      checkpoint_skipped_steps: save :attr:`skipped_steps` in checkpoints (opt-in; default
        False). Off, a checkpoint restored into a new process restarts the count at 0, and a
        device checkpoint (no such counter) restores with a plain name-based Saver. On, a
        ``tf.compat.v1.train.Saver`` writes it under the keys ``skipped_steps_table-keys`` /
        ``-values`` (and ``tf.train.Checkpoint`` as the child ``skipped_steps``), so a restart
        resumes the count; such a Saver then needs those keys in every checkpoint it restores.
      name: the optimizer's name; default ``"NPULossScale_" + opt.get_name()``.

    Attribute lookups that this class does not answer fall through to the wrapped optimizer.
    """

    def __init__(self, opt, loss_scale_manager, is_distributed=False, *, backend=None,
                 agreement=None, summaries=False, accumulation_steps=1, name=None,
                 checkpoint_skipped_steps=False):
        if not isinstance(opt, tf.compat.v1.train.Optimizer):
            raise TypeError("opt must be a tf.compat.v1.train.Optimizer (for example "
                            "tf.compat.v1.train.AdamOptimizer); got %r (type %s). For Keras "
                            "optimizers use a Keras loss-scale optimizer instead."
                            % (opt, type(opt).__name__))
        manager = as_manager(loss_scale_manager)
        _checks.boolean("is_distributed", is_distributed)
        _checks.boolean("summaries", summaries)
        self._checkpoint_skipped = _checks.boolean("checkpoint_skipped_steps",
                                                   checkpoint_skipped_steps)
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError("name must be a non-empty string or None; got %r" % (name,))
        self._accumulation_steps = _checks.positive_int("accumulation_steps", accumulation_steps)
        self._manager = manager
        self._is_distributed = is_distributed
        self._check_overflow = bool(manager.get_enable_overflow_check())
        # How this optimizer detects overflow and agrees across ranks; each step is one of its
        # StepChecks. The backend is made now: npu refuses here when npu_bridge is missing.
        self._overflow = OverflowCheck(backend, is_distributed, agreement)
        self._overflow.detector  # pylint: disable=pointless-statement
        self._summaries = summaries
        super().__init__(opt, manager)
        # The attribute Ascend's TF1 optimizer (and contrib's) keeps the manager in: the user's.
        self._loss_scale_manager = loss_scale_manager
        self._name = name or "NPULossScale_" + opt.get_name()
        self._per_graph = _graphs.PerGraph("optimizer")
        self._state()   # create skipped_steps now, beside the manager's variables

    # -- public properties --------------------------------------------------------------------
    @property
    def loss_scale_manager(self):
        return self._loss_scale_manager

    @property
    def inner_optimizer(self):
        return self._optimizer

    @property
    def is_distributed(self):
        return self._is_distributed

    @property
    def accumulation_steps(self):
        return self._accumulation_steps

    @property
    def backend_name(self):
        """The overflow detection backend in use: ``npu``, ``emulation`` or ``inf_nan``."""
        return self._overflow.backend_name

    @property
    def loss_scale(self):
        """The current loss scale, a float32 scalar tensor."""
        return self._manager.get_loss_scale()

    def _built_state(self, what):
        state = self._per_graph.peek()
        if state is None:
            raise RuntimeError("%s exists once this optimizer is used in the current graph: "
                               "build it here (construct it, or call minimize() or "
                               "apply_gradients()) first" % what)
        return state

    @property
    def skipped_steps(self):
        """int64 scalar tensor: how many steps were skipped because of an overflow.

        In a ``tf.compat.v1`` graph it is the tensor ``skipped_steps:0`` (fetch it with the train
        op or after it); in eager execution the current count. The counter needs no initializer
        and is not saved in checkpoints (Ascend's optimizer has none) unless the optimizer was
        built with ``checkpoint_skipped_steps=True``. Reading it creates no variable: it exists in
        the graph the optimizer was built or used in.
        """
        state = self._built_state("skipped_steps")
        if state["skipped_read"] is not None and _graphs.outermost_graph() is not None \
                and tf.compat.v1.get_default_graph() is state["skipped_read"].graph:
            return state["skipped_read"]
        return state["skipped_steps"].read()

    @property
    def overflow_status_reduce_all(self):
        """Scalar bool tensor of the last train op built in this graph: True = all finite."""
        finite = self._built_state("overflow_status_reduce_all").get("finite")
        if finite is None:
            raise RuntimeError("overflow_status_reduce_all exists once the train op is built: call "
                               "minimize() or apply_gradients() first (and the manager must have "
                               "enable_overflow_check=True)")
        return finite

    @property
    def step_report(self):
        """Tensors describing the last train op built in this graph, for hooks and logging.

        A :class:`~npu_loss_scale.StepReport` (a dict): ``loss_scale`` (the scale the step used),
        ``next_loss_scale`` (the scale after the step; absent when the manager cannot tell),
        ``finite`` (bool; absent without an overflow check), ``skipped_steps`` (after the step)
        and ``global_step`` (after the step; absent when no global step was passed). What the
        step cannot tell is left out rather than None, which ``sess.run`` would refuse to fetch.
        Fetching them with the train op costs nothing extra and changes nothing: none of them has
        a side effect; ``sess.run`` gives back a ``StepReport`` of their values.
        """
        report = self._built_state("step_report").get("report")
        if report is None:
            if not self._check_overflow and self._accumulation_steps == 1:
                raise RuntimeError("step_report: with enable_overflow_check=False (and no "
                                   "accumulation) a step is the inner optimizer's "
                                   "apply_gradients, which reports nothing; read loss_scale "
                                   "instead")
            raise RuntimeError("step_report exists once the train op is built: call minimize() or "
                               "apply_gradients() first")
        return StepReport({key: value for key, value in report.items() if value is not None})

    def get_name(self):
        return self._name

    def variables(self):
        own = []
        state = self._per_graph.peek()
        if state is not None:
            own = ([state["micro_step"]] if "micro_step" in state else []) \
                + list(state["accumulators"].values())
        manager_state = self._manager._per_graph.peek()  # pylint: disable=protected-access
        manager_vars = list(manager_state.get("_weights", {}).values()) if manager_state else []
        return self._optimizer.variables() + manager_vars + own

    def get_slot(self, var, name):
        """Slots (Adam's ``m`` and ``v``, Momentum's ``momentum``...) live in the inner optimizer."""
        return self._optimizer.get_slot(var, name)

    def get_slot_names(self):
        """The wrapper's own slots: none (as TensorFlow's and contrib's loss-scale optimizers).

        The slots live in the inner optimizer (``get_slot`` reaches them;
        ``inner_optimizer.get_slot_names()`` lists them). Listing them here too would make
        ``tf.train.Checkpoint`` meet each slot twice, which it refuses."""
        return []

    def __getattr__(self, attr):
        """Public attributes the wrapper lacks come from the inner optimizer; private ones
        (``_name``) do not: a misspelt private name must not reach a different object."""
        inner = self.__dict__.get("_optimizer")
        if inner is None or attr.startswith("_"):
            raise AttributeError("%r object has no attribute %r%s" % (
                type(self).__name__, attr, " (private attributes are not forwarded to the inner "
                "optimizer)" if inner is not None and attr.startswith("_") else ""))
        return getattr(inner, attr)

    # -- per-graph state ----------------------------------------------------------------------
    def _state(self):
        return self._per_graph.get(self._build_state)

    def _build_state(self):
        skipped = Counter("skipped_steps", checkpoint=self._checkpoint_skipped)
        in_graph = _graphs.outermost_graph() is not None
        state = {"skipped_steps": skipped, "finite": None, "report": None, "accumulators": {},
                 "skipped_read": skipped.read(name="skipped_steps") if in_graph else None,
                 "reader": self._overflow.reader() if self._check_overflow else None}
        if self._accumulation_steps > 1:
            state["micro_step"] = Variable(0, dtype=tf.int64, trainable=False,
                                              name="accumulation_step")
        return state

    def _extra_trackable_children(self):
        children = {}
        per_graph = self.__dict__.get("_per_graph")   # None while constructing
        state = per_graph.peek() if per_graph is not None else None
        if state is not None:
            if "micro_step" in state:
                children["accumulation_step"] = state["micro_step"]
            if self._checkpoint_skipped:
                children["skipped_steps"] = state["skipped_steps"].table
        return children

    # -- gradients ----------------------------------------------------------------------------
    def _doing_dynamic_loss_scaling(self):
        # TensorFlow applies a non-dynamic scale without any check; Ascend checks whenever the
        # manager asks for it, fixed scale or not.
        return self._check_overflow

    def compute_gradients(self, loss, var_list=None,
                          gate_gradients=tf.compat.v1.train.Optimizer.GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False,
                          grad_loss=None):
        """Gradients of ``loss`` computed with the loss scaled up, returned scaled back down.

        Nothing is cleared or left behind: the overflow status keeps whatever earlier runs
        recorded until ``apply_gradients`` reads it.
        """
        if callable(loss) and not tf.executing_eagerly():
            loss = loss()
        _checks.loss_tensor(loss)
        var_list = _checks.variable_list("var_list", var_list)
        scaled_loss = self._scale_loss(loss)
        if grad_loss is None and isinstance(scaled_loss, tf.Tensor) and self._check_overflow \
                and not tf.executing_eagerly():
            # TensorFlow seeds backpropagation with a constant that does not wait for the
            # forward pass; a seed made from the loss does, so the overflow read that waits for
            # the gradients also waits for every saturation event of the forward pass feeding
            # the loss (a cond or loop body included).
            grad_loss = tf.ones_like(scaled_loss)
        grads_and_vars = self._optimizer.compute_gradients(
            loss=scaled_loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        grads = [g for g, _ in grads_and_vars]
        if not self._check_overflow:
            return list(zip(self._unscale_grads(grads), [v for _, v in grads_and_vars]))
        # The check of the scaled gradients: one read pass (or none: the npu register). Each
        # gradient's unscaling waits for the check's read of that gradient, so the multiply is
        # the last reader of the scaled values and TensorFlow writes the unscaled values into
        # their buffer (no new 4-bytes-per-parameter allocation, no second buffer to fill).
        # With the fused kernel (npu_loss_scale._internal.kernels) the check and the unscaling are one
        # pass: the check hands back the unscaled values.
        readers = {}
        reciprocal = Reciprocal.of(self._loss_scale())
        observation = self._overflow.observe(grads, readers, reciprocal)
        unscaled = self._unscale_after(grads, readers, reciprocal)
        self._overflow.mark([(g, v) for g, (_, v) in zip(unscaled, grads_and_vars)
                             if g is not None], observation)
        return list(zip(unscaled, [v for _, v in grads_and_vars]))

    def _unscale_grads(self, grads):
        reciprocal = Reciprocal.of(self._loss_scale())
        return [None if g is None else self._scale_grad(g, reciprocal) for g in grads]

    def _scale_grad(self, grad, loss_scale_reciprocal):
        return unscale_gradient(grad, loss_scale_reciprocal)

    def _unscale_after(self, grads, readers, reciprocal):
        """``_unscale_grads``, each gradient's multiply run after ``readers[id(values)]`` (or
        taken from it when the check already unscaled that gradient)."""
        out = []
        for g in grads:
            if g is None:
                out.append(None)
                continue
            values = g.values if isinstance(g, tf.IndexedSlices) else g
            reader = readers.get(id(values))
            if isinstance(reader, detection.Unscaled):
                out.append(tf.IndexedSlices(reader.values, g.indices, g.dense_shape)
                           if isinstance(g, tf.IndexedSlices) else reader.values)
                continue
            with tf.control_dependencies([reader] if reader is not None
                                         and not tf.executing_eagerly() else []):
                out.append(self._scale_grad(g, reciprocal))
        return out

    # -- applying -----------------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Reads the overflow status and applies the gradients only when nothing overflowed.

        See the class docstring; with ``accumulation_steps=N`` it accumulates and decides every
        N-th run.
        """
        if tf.distribute.in_cross_replica_context():
            raise ValueError("apply_gradients() must be called in a replica context.")
        grads_and_vars = tuple(grads_and_vars)
        if self._accumulation_steps > 1 and tf.distribute.has_strategy():
            raise NotImplementedError(
                "accumulation_steps=%d inside a tf.distribute strategy is not supported: use "
                "accumulation_steps=1 there, or agree through Horovod, HCCL or TF collectives "
                "(agreement='horovod', 'hccl' or 'collective') outside a strategy"
                % self._accumulation_steps)
        if not self._check_overflow and self._accumulation_steps == 1:
            return self._optimizer.apply_gradients(grads_and_vars, global_step, name)
        return tf.distribute.get_replica_context().merge_call(
            self._distributed_apply, args=(grads_and_vars, global_step, name))
