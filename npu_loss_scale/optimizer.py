"""NPULossScaleOptimizer: Ascend loss scaling on TensorFlow's own loss-scale optimizer."""
import sys
import threading

import tensorflow as tf

from . import _checks, agreement as agreement_lib, detection
from .policy import LossScaleManager

_Base = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer

FINITE_OP_NAME = "overflow_status_reduce_all"
SUMMARY_SCOPE = "npu_loss_scale"


class NPULossScaleOptimizer(_Base):
    """Wraps a ``tf.compat.v1.train`` optimizer with Ascend-style loss scaling.

    What one training step does (``minimize`` = ``compute_gradients`` + ``apply_gradients``):

    1. The overflow status is cleared, the loss is multiplied by the manager's loss scale, the
       inner optimizer computes the gradients of the scaled loss, and every non-None gradient
       (dense or ``IndexedSlices``) is multiplied by ``1 / loss_scale``: gradients come back
       unscaled.
    2. After every gradient exists, the overflow status is read (and cleared again): from the
       device's float-status register (``npu`` backend), its CPU emulation (``emulation``) or an
       IEEE inf/NaN test (``inf_nan``). With ``is_distributed=True`` the status is summed over
       all ranks first, so every rank takes the same decision. The step is *finite* when the
       status is all zeros; that boolean is the tensor :attr:`overflow_status_reduce_all`.
    3. Finite step: the inner optimizer applies the gradients (and advances ``global_step``).
       Overflowed step: nothing is applied, ``global_step`` stays, :attr:`skipped_steps` grows
       by one. In both cases ``loss_scale_manager.update_loss_scale(finite)`` runs.

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
      loss_scale_manager: a :class:`LossScaleManager`.
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
      name: the optimizer's name; default ``"NPULossScale_" + opt.get_name()``.

    Attribute lookups that this class does not answer fall through to the wrapped optimizer.
    """

    def __init__(self, opt, loss_scale_manager, is_distributed=False, *, backend=None,
                 agreement=None, summaries=False, name=None):
        if not isinstance(opt, tf.compat.v1.train.Optimizer):
            raise TypeError("opt must be a tf.compat.v1.train.Optimizer (for example "
                            "tf.compat.v1.train.AdamOptimizer); got %r (type %s). For Keras "
                            "optimizers use a Keras loss-scale optimizer instead."
                            % (opt, type(opt).__name__))
        if not isinstance(loss_scale_manager, LossScaleManager):
            raise TypeError("loss_scale_manager must be a LossScaleManager (FixedLossScaleManager "
                            "or ExponentialUpdateLossScaleManager); got %r (type %s)"
                            % (loss_scale_manager, type(loss_scale_manager).__name__))
        _checks.boolean("is_distributed", is_distributed)
        _checks.boolean("summaries", summaries)
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError("name must be a non-empty string or None; got %r" % (name,))
        self._manager = loss_scale_manager
        self._is_distributed = is_distributed
        self._check_overflow = bool(loss_scale_manager.get_enable_overflow_check())
        self._backend_name = detection.get_backend_name(backend)
        self._detector = detection.make_detector(self._backend_name)
        if agreement is not None and not isinstance(agreement, agreement_lib.Agreement):
            _checks.one_of("agreement", agreement, agreement_lib.AGREEMENT_NAMES)
        self._agreement_choice = agreement
        self._summaries = summaries
        super().__init__(opt, loss_scale_manager)
        self._name = name or "NPULossScale_" + opt.get_name()
        self._graph_state_lock = threading.Lock()
        self._graph_state = {}
        self._state()   # create skipped_steps now, beside the manager's variables

    # -- public properties --------------------------------------------------------------------
    @property
    def loss_scale_manager(self):
        return self._manager

    @property
    def inner_optimizer(self):
        return self._optimizer

    @property
    def is_distributed(self):
        return self._is_distributed

    @property
    def backend_name(self):
        """The overflow detection backend in use: ``npu``, ``emulation`` or ``inf_nan``."""
        return self._backend_name

    @property
    def loss_scale(self):
        """The current loss scale, a float32 scalar tensor."""
        return self._manager.get_loss_scale()

    @property
    def skipped_steps(self):
        """Non-trainable int64 variable: how many steps were skipped because of an overflow."""
        return self._state()["skipped_steps"]

    @property
    def overflow_status_reduce_all(self):
        """Scalar bool tensor of the last train op built in this graph: True = all finite."""
        finite = self._state().get("finite")
        if finite is None:
            raise RuntimeError("overflow_status_reduce_all exists once the train op is built: call "
                               "minimize() or apply_gradients() first (and the manager must have "
                               "enable_overflow_check=True)")
        return finite

    def get_name(self):
        return self._name

    def variables(self):
        return super().variables() + [self.skipped_steps]

    def get_slot(self, var, name):
        """Slots (Adam's ``m`` and ``v``, Momentum's ``momentum``...) live in the inner optimizer."""
        return self._optimizer.get_slot(var, name)

    def get_slot_names(self):
        return self._optimizer.get_slot_names()

    def __getattr__(self, attr):
        inner = self.__dict__.get("_optimizer")
        if inner is None or attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(inner, attr)

    # -- per-graph state ----------------------------------------------------------------------
    def _state(self):
        key = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        with self._graph_state_lock:
            state = self._graph_state.get(key)
            if state is None:
                with tf.init_scope(), tf.control_dependencies(None):
                    skipped = tf.compat.v1.Variable(
                        0, dtype=tf.int64, trainable=False, use_resource=True,
                        name="skipped_steps",
                        synchronization=tf.VariableSynchronization.AUTO,
                        aggregation=tf.VariableAggregation.NONE)
                self._track_trackable(skipped, "skipped_steps", overwrite=True)
                # observed: gradients this optimizer returned whose scaled form the detector has
                # already looked at (so apply need not scan them again).
                state = {"skipped_steps": skipped, "finite": None, "observed": set()}
                self._graph_state[key] = state
            return state

    # -- gradients ----------------------------------------------------------------------------
    def _doing_dynamic_loss_scaling(self):
        # TensorFlow applies a non-dynamic scale without any check; Ascend checks whenever the
        # manager asks for it, fixed scale or not.
        return self._check_overflow

    def compute_gradients(self, loss, var_list=None,
                          gate_gradients=tf.compat.v1.train.Optimizer.GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False,
                          grad_loss=None):
        """Gradients of ``loss`` computed with the loss scaled up, returned scaled back down."""
        if callable(loss) and not tf.executing_eagerly():
            loss = loss()
        begin = None
        if self._check_overflow:
            begin = self._detector.begin_step(loss if isinstance(loss, tf.Tensor) else None)
        with tf.control_dependencies([begin] if begin is not None else []):
            scaled_loss = self._scale_loss(loss)
            if begin is not None and isinstance(scaled_loss, tf.Tensor):
                # Backpropagation starts from grad_loss. TensorFlow builds its default seed from
                # the loss's static shape, a constant that would not wait for the clear; a seed
                # made here does, so every gradient op runs after the register was cleared.
                grad_loss = (tf.ones_like(scaled_loss) if grad_loss is None
                             else tf.identity(grad_loss))
            # Gradient ops that read only forward values (the 2*x in the gradient of x**2) do
            # not depend on the seed: building the whole backward pass here orders them too.
            grads_and_vars = self._optimizer.compute_gradients(
                loss=scaled_loss, var_list=var_list, gate_gradients=gate_gradients,
                aggregation_method=aggregation_method,
                colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        grads = [g for g, _ in grads_and_vars]
        observed = self._detector.observe_scaled_gradients(grads) if self._check_overflow else None
        with tf.control_dependencies([observed] if observed is not None else []):
            unscaled = self._unscale_grads(grads)
        if observed is not None:
            self._state()["observed"].update(detection.observed_refs(unscaled))
        return list(zip(unscaled, [v for _, v in grads_and_vars]))

    def _scale_grad(self, grad, loss_scale_reciprocal):
        def unscale(values):
            if values.dtype == tf.float32:
                return values * loss_scale_reciprocal
            if values.dtype == tf.float64:
                return values * tf.cast(loss_scale_reciprocal, tf.float64)
            # float16/bfloat16: a reciprocal like 2**-32 is not representable there, so unscale
            # in float32 and cast the result back.
            return tf.cast(tf.cast(values, tf.float32) * loss_scale_reciprocal, values.dtype)

        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(unscale(grad.values), grad.indices, grad.dense_shape)
        return unscale(grad)

    # -- applying -----------------------------------------------------------------------------
    def _replica_status(self, grads):
        return self._detector.read_status(grads, observed=self._state()["observed"])

    def _distributed_apply(self, distribution, grads_and_vars, global_step=None, name=None):
        """Cross-replica part of apply_gradients (reached through merge_call, as in TensorFlow)."""
        name = name if name is not None else self.get_name()
        grads = [g for g, _ in grads_and_vars]
        state = self._state()

        if tf.distribute.has_strategy():
            per_replica = distribution.extended.call_for_each_replica(
                self._replica_status, args=(grads,))
            status = distribution.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            end_ops = distribution.extended.call_for_each_replica(
                lambda s: self._detector.end_step(s), args=(per_replica,))
            end_ops = [op for op in tf.nest.flatten(distribution.experimental_local_results(
                end_ops)) if op is not None]
        else:
            status = self._replica_status(grads)
            end_op = self._detector.end_step(status)
            end_ops = [end_op] if end_op is not None else []
        if self._is_distributed:
            agreement = agreement_lib.make_agreement(self._agreement_choice, self._backend_name)
            status = agreement.reduce(status)
        else:
            agreement_lib.warn_if_ranks_may_diverge()
        finite = tf.reduce_all(tf.equal(status, 0.0), name=FINITE_OP_NAME)
        state["finite"] = finite

        scale = self._manager.get_loss_scale()
        update_scale = self._manager.update_loss_scale(finite)

        def apply_fn():
            return self._apply_gradients(distribution, grads_and_vars, global_step,
                                         name + "-wrapped")

        maybe_apply = tf.cond(finite, apply_fn, tf.no_op)
        overflowed = tf.logical_not(finite)
        count = state["skipped_steps"].assign_add(tf.cast(overflowed, tf.int64))
        stuck = tf.cond(tf.logical_and(overflowed, scale <= 1.0),
                        lambda: self._warn_stuck(scale), lambda: tf.constant(False))
        if self._summaries:
            self._add_summaries(scale, state["skipped_steps"], overflowed)
        return tf.group(maybe_apply, update_scale, count, stuck, *end_ops, name=name)

    @staticmethod
    def _warn_stuck(scale):
        message = tf.print("npu_loss_scale WARNING: gradients overflowed at loss scale", scale,
                           "- the scale cannot go lower, the step is skipped. The model itself "
                           "overflows: check its fp16 ranges.", output_stream=sys.stderr)
        with tf.control_dependencies([message]):
            return tf.constant(True)

    @staticmethod
    def _add_summaries(scale, skipped, overflowed):
        # Tags: npu_loss_scale/loss_scale, npu_loss_scale/skipped_steps, npu_loss_scale/overflow
        with tf.name_scope(SUMMARY_SCOPE + "/"):
            tf.compat.v1.summary.scalar("loss_scale", scale)
            tf.compat.v1.summary.scalar("skipped_steps", skipped)
            tf.compat.v1.summary.scalar("overflow", tf.cast(overflowed, tf.float32))
