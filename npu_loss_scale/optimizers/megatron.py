"""Megatron's ``MixedPrecisionOptimizer`` features on a ``tf.compat.v1.train`` optimizer.

:class:`MegatronMixedPrecisionOptimizer` is an :class:`~npu_loss_scale.NPULossScaleOptimizer`
whose inner optimizer is a :class:`MegatronGradientProcessor` around yours::

    NPULossScaleOptimizer  (scale, unscale, overflow detection, agreement, skip, scaler update)
      └─ MegatronGradientProcessor  (runs only on finite steps, with unscaled gradients:
           clip by global norm, fp32 main parameters, copy back into the model)
           └─ your optimizer  (e.g. AdamOptimizer, or hvd.DistributedOptimizer(AdamOptimizer))

One step, as in Megatron's ``MixedPrecisionOptimizer.step()``:

1. gradients of the scaled loss, unscaled (NPULossScaleOptimizer);
2. the global L2 norm of the unscaled gradients and, with ``log_num_zeros_in_grad``, the number
   of zero entries are computed; they are exposed as :attr:`~MegatronMixedPrecisionOptimizer.
   grad_norm` and :attr:`~MegatronMixedPrecisionOptimizer.num_zeros_in_grad` (and as summaries);
3. overflow check; the grad scaler is updated (``update(found_inf)``);
4. overflowed step: nothing else happens (Megatron returns ``(False, None, None)``; here
   ``grad_norm`` is NaN and ``num_zeros_in_grad`` is -1 for such a step);
5. finite step: gradients are clipped with ``tf.clip_by_global_norm(grads, clip_grad)`` when
   ``clip_grad > 0``; the inner optimizer updates the float32 main copies of float16/bfloat16
   variables (and float32 variables directly); the main copies are cast back into the model.

Differences from Megatron, on purpose: the norm is computed on every step even with
``clip_grad=0`` (Megatron reports 0.0 then); clipping uses TensorFlow's rule
``g * clip / max(norm, clip)`` (Megatron's ``clip / (norm + 1e-6)`` differs by the epsilon);
zeros are counted on the unscaled gradients before clipping (clipping only multiplies, so the
count is the same unless a value underflows); gradients of float16 variables reach the main
copies after NPULossScaleOptimizer unscaled them in float32 and cast them back to float16, so an
unscaled gradient below float16's smallest subnormal (about 6e-8) is lost — scale the loss.

Distributed runs: with ``is_distributed=True`` and Horovod, pass ``hvd.DistributedOptimizer(opt)``
as ``optimizer``; Horovod averages the gradients in ``compute_gradients``, so the norm, the zero
count, the clipping and the overflow check all see the averaged gradients that every rank applies.
Under a ``tf.distribute`` strategy the statistics are of each replica's own gradients (the
strategy sums them later, inside the apply).

Example::

    import npu_loss_scale as nls
    scaler = nls.DynamicGradScaler(2**16, 1.0, 2.0, 0.5, growth_interval=1000, hysteresis=2)
    opt = nls.MegatronMixedPrecisionOptimizer(tf.compat.v1.train.AdamOptimizer(1e-4), scaler,
                                              clip_grad=1.0, log_num_zeros_in_grad=True, fp16=True)
    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    _, norm, zeros = sess.run([train_op, opt.grad_norm, opt.num_zeros_in_grad])
"""
import weakref

import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal.compat.ops import where
from npu_loss_scale._internal.compat.variables import Variable, key as variable_key
from npu_loss_scale.scaling.megatron import ConstantGradScaler
from npu_loss_scale.optimizers.loss_scale import SUMMARY_SCOPE, NPULossScaleOptimizer
from npu_loss_scale.scaling.base import LossScaleManager

_LOW_PRECISION = (tf.float16, tf.bfloat16)
MAIN_PARAM_SUFFIX = "fp32_main"


def _values(grad):
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _cast(grad, dtype):
    if grad is None or grad.dtype == dtype:
        return grad
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(tf.cast(grad.values, dtype), grad.indices, grad.dense_shape)
    return tf.cast(grad, dtype)


def global_norm(grads):
    """float32 global L2 norm of ``grads`` (None entries ignored; any floating dtype)."""
    grads = [_cast(g, tf.float32) for g in grads if g is not None]
    if not grads:
        return tf.zeros([], tf.float32)
    return tf.linalg.global_norm(grads)


def count_zeros(grads):
    """int64 number of zero entries in ``grads``, counted on the dense gradients.

    An ``IndexedSlices`` gradient counts the rows it does not touch as zeros, as the dense
    gradient would.
    """
    total = tf.zeros([], tf.int64)
    for g in grads:
        if g is None:
            continue
        dense = tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
        size = tf.size(dense, out_type=tf.int64)
        total += size - tf.math.count_nonzero(dense, dtype=tf.int64)
    return total


class MegatronGradientProcessor(tf.compat.v1.train.Optimizer):
    """Clipping and fp32 main parameters around an optimizer; meant as the inner optimizer.

    ``apply_gradients`` takes unscaled gradients (it runs inside NPULossScaleOptimizer's finite
    branch) and: casts the gradients of float16/bfloat16 variables to float32 and pairs them with
    the variables' float32 main copies; clips all gradients with ``tf.clip_by_global_norm`` when
    ``clip_grad > 0``; lets the wrapped optimizer apply them (slots such as Adam's ``m``/``v``
    belong to the main copies); then assigns each main copy, cast, to its model variable.

    The main copies are non-trainable float32 variables named ``<variable>/fp32_main``, created
    from the model variables' initial values (graph mode) or current values (eager); they are in
    the global-variables collection (``tf.compat.v1.train.Saver``) and tracked for
    ``tf.train.Checkpoint``. After loading the model without the optimizer state, call
    :meth:`reload_model_params`.

    Args:
      optimizer: a ``tf.compat.v1.train.Optimizer``.
      clip_grad: clip by global L2 norm to this value; 0 turns clipping off (Megatron's rule).
      main_params: keep float32 main copies of float16/bfloat16 variables (default True).
    """

    def __init__(self, optimizer, clip_grad=0.0, main_params=True, name=None):
        if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
            raise TypeError("optimizer must be a tf.compat.v1.train.Optimizer (for example "
                            "tf.compat.v1.train.AdamOptimizer); got %r (type %s)"
                            % (optimizer, type(optimizer).__name__))
        self._clip_grad = _checks.real_number("clip_grad", clip_grad, minimum=0.0,
                                              accepted=">= 0 (0 turns clipping off)")
        self._use_main_params = _checks.boolean("main_params", main_params)
        super().__init__(use_locking=optimizer._use_locking,  # pylint: disable=protected-access
                         name=name or "Megatron_" + optimizer.get_name())
        self._opt = optimizer
        # Tracking the wrapped optimizer is deferred to _track_base_optimizer(): an
        # NPULossScaleOptimizer built around this object forwards unknown attributes to its inner
        # optimizer, and would adopt this object's dependency lists as its own if they already
        # existed while it initialises (it then fails on a duplicate "base_optimizer").
        self._base_tracked = False
        self._mains = _graphs.PerGraph("main_params")   # per graph: {var ref: (var, main)}

    @property
    def inner_optimizer(self):
        return self._opt

    def _track_base_optimizer(self):
        if not self._base_tracked:
            self._track_trackable(self._opt, "base_optimizer", overwrite=True)
            self._base_tracked = True

    @property
    def clip_grad(self):
        return self._clip_grad

    # -- main parameters --------------------------------------------------------------------
    def _main_table(self):
        """``{variable key: (model variable, main copy)}`` of the current outermost graph."""
        return self._mains.get(dict)

    def main_params(self):
        """``[(model_variable, float32 main copy)]`` in the current graph."""
        return list(self._main_table().values())

    def main_param(self, var):
        """The float32 main copy of ``var``, or None if it has none."""
        entry = self._main_table().get(variable_key(var))
        return entry[1] if entry is not None else None

    def build_main_params(self, var_list):
        """Creates main copies of the float16/bfloat16 variables of ``var_list`` (idempotent)."""
        self._track_base_optimizer()
        if not self._use_main_params:
            return []
        table = self._main_table()
        made = []
        for var in var_list:
            if var is None or var.dtype.base_dtype not in _LOW_PRECISION or variable_key(var) in table:
                continue
            base = var.name.split(":")[0]
            with tf.init_scope(), tf.control_dependencies(None):
                if tf.executing_eagerly():
                    initial = tf.cast(var, tf.float32)
                    main = Variable(initial, trainable=False, dtype=tf.float32,
                                    name=base + "/" + MAIN_PARAM_SUFFIX)
                else:
                    graph = tf.compat.v1.get_default_graph()
                    with graph.name_scope(None):
                        main = tf.compat.v1.Variable(
                            tf.cast(var.initial_value, tf.float32), trainable=False,
                            dtype=tf.float32, use_resource=True,
                            name=base + "/" + MAIN_PARAM_SUFFIX)
            self._track_trackable(main, MAIN_PARAM_SUFFIX + "." + base.replace("/", "."),
                                  overwrite=True)
            table[variable_key(var)] = (var, main)
            made.append(main)
        return made

    def reload_model_params(self):
        """Copies the model variables (cast to float32) into their main copies.

        Eager: done at once, returns None. Graph mode: returns the op to run.
        """
        pairs = self.main_params()
        assigns = [main.assign(tf.cast(var, tf.float32)) for var, main in pairs]
        if tf.executing_eagerly():
            return None
        return tf.group(*assigns, name="reload_model_params")

    # -- Optimizer interface ----------------------------------------------------------------
    def compute_gradients(self, *args, **kwargs):
        return self._opt.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = [(g, v) for g, v in grads_and_vars]
        self.build_main_params([v for g, v in grads_and_vars if g is not None])
        table = self._main_table()
        pairs, copies = [], []
        for g, v in grads_and_vars:
            entry = table.get(variable_key(v)) if g is not None else None
            if entry is None:
                pairs.append((g, v))
            else:
                pairs.append((_cast(g, tf.float32), entry[1]))
                copies.append((v, entry[1]))    # the variable as this replica sees it
        if self._clip_grad > 0:
            present = [i for i, (g, _) in enumerate(pairs) if g is not None]
            grads = [pairs[i][0] for i in present]
            dtypes = {_values(g).dtype for g in grads}
            use_norm = None if len(dtypes) <= 1 else global_norm(grads)
            clipped, _ = tf.clip_by_global_norm(grads, self._clip_grad, use_norm=use_norm)
            for i, g in zip(present, clipped):
                pairs[i] = (g, pairs[i][1])
        apply = self._opt.apply_gradients(pairs, global_step=global_step, name=name)
        if not copies:
            return apply
        with tf.control_dependencies([apply]):
            back = [var.assign(tf.cast(main, var.dtype.base_dtype), read_value=False)
                    for var, main in copies]
        return tf.group(apply, *back, name="copy_main_params_to_model")

    def get_slot(self, var, name):
        main = self.main_param(var)
        return self._opt.get_slot(main if main is not None else var, name)

    def get_slot_names(self):
        """None of its own: the slots are the inner optimizer's (see
        ``NPULossScaleOptimizer.get_slot_names``)."""
        return []

    def variables(self):
        return self._opt.variables() + [main for _, main in self.main_params()]

    def _apply_dense(self, grad, var):  # pragma: no cover - apply_gradients is overridden
        raise NotImplementedError

    def _resource_apply_dense(self, grad, handle):  # pragma: no cover
        raise NotImplementedError

    def _apply_sparse(self, grad, var):  # pragma: no cover
        raise NotImplementedError


class MegatronMixedPrecisionOptimizer(NPULossScaleOptimizer):
    """Megatron's ``MixedPrecisionOptimizer`` on TensorFlow: see the module docstring.

    Example::

        scaler = nls.DynamicGradScaler(2**16, 1.0, 2.0, 0.5, growth_interval=1000, hysteresis=2)
        opt = nls.MegatronMixedPrecisionOptimizer(tf.compat.v1.train.AdamOptimizer(1e-4), scaler,
                                                  clip_grad=1.0, log_num_zeros_in_grad=True,
                                                  fp16=True)
        train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())

    Args:
      optimizer: a ``tf.compat.v1.train.Optimizer`` (may be ``hvd.DistributedOptimizer(...)``).
      grad_scaler: a grad scaler (:class:`~npu_loss_scale.DynamicGradScaler`,
        :class:`~npu_loss_scale.ConstantGradScaler`) or any loss-scale manager. None is allowed
        unless ``fp16``: then the scale is 1 (a ``ConstantGradScaler(1.0)``) and a non-finite
        step is still refused.
      clip_grad: clip the unscaled gradients to this global L2 norm on finite steps; 0 = off.
      log_num_zeros_in_grad: build :attr:`num_zeros_in_grad`.
      fp16: the model's half type is float16, as Megatron's flag (at most one of ``fp16`` and
        ``bf16`` may be True); requires a grad scaler.
      bf16: the model's half type is bfloat16, as Megatron's flag.
      main_params: float32 main copies for float16/bfloat16 variables (default True; Megatron
        always keeps them).
      is_distributed: as for :class:`~npu_loss_scale.NPULossScaleOptimizer`.
      backend: as for :class:`~npu_loss_scale.NPULossScaleOptimizer`.
      agreement: as for :class:`~npu_loss_scale.NPULossScaleOptimizer`.
      summaries: as for :class:`~npu_loss_scale.NPULossScaleOptimizer`; also adds
        ``npu_loss_scale/grad_norm`` and (with ``log_num_zeros_in_grad``)
        ``npu_loss_scale/num_zeros_in_grad``.
      name: as for :class:`~npu_loss_scale.NPULossScaleOptimizer`.
    """

    def __init__(self, optimizer, grad_scaler=None, *, clip_grad=0.0, log_num_zeros_in_grad=False,
                 fp16=False, bf16=False, main_params=True, is_distributed=False, backend=None,
                 agreement=None, summaries=False, name=None):
        _checks.boolean("fp16", fp16)
        _checks.boolean("bf16", bf16)
        _checks.boolean("log_num_zeros_in_grad", log_num_zeros_in_grad)
        if fp16 and bf16:
            raise ValueError("fp16 and bf16 cannot both be True: choose the model's half type")
        if grad_scaler is None:
            if fp16:
                raise ValueError("grad_scaler=None is only accepted with bf16 (as in Megatron): "
                                 "fp16 needs a DynamicGradScaler or ConstantGradScaler")
            grad_scaler = ConstantGradScaler(1.0)
        elif not isinstance(grad_scaler, LossScaleManager):
            raise TypeError("grad_scaler must be a DynamicGradScaler, ConstantGradScaler, another "
                            "MegatronGradScaler or loss-scale manager, or None (bf16 only); got %r "
                            "(type %s)" % (grad_scaler, type(grad_scaler).__name__))
        processor = MegatronGradientProcessor(optimizer, clip_grad=clip_grad,
                                              main_params=main_params)
        self._fp16, self._bf16 = fp16, bf16
        self._log_num_zeros = log_num_zeros_in_grad
        self._stats = weakref.WeakKeyDictionary()
        self._eager_stats = {}
        super().__init__(processor, grad_scaler, is_distributed, backend=backend,
                         agreement=agreement, summaries=summaries,
                         name=name or "MegatronMixedPrecision_" + optimizer.get_name())
        processor._track_base_optimizer()  # pylint: disable=protected-access

    # -- Megatron's interface ---------------------------------------------------------------
    @property
    def grad_scaler(self):
        return self.loss_scale_manager

    @property
    def fp16(self):
        return self._fp16

    @property
    def bf16(self):
        return self._bf16

    @property
    def clip_grad(self):
        return self.inner_optimizer.clip_grad

    @property
    def gradient_processor(self):
        """The :class:`MegatronGradientProcessor` inside (the loss-scale optimizer's inner one)."""
        return self.inner_optimizer

    def get_loss_scale(self):
        """The current loss scale, a float32 scalar tensor (1.0 without a grad scaler)."""
        return self.loss_scale_manager.get_loss_scale()

    def reload_model_params(self, session=None):
        """Refreshes the float32 main copies from the model variables.

        Call it after loading the model's variables without the optimizer's (the main copies
        would otherwise overwrite the loaded values at the next step). Eager: done at once.
        Graph mode: returns the op, and runs it when ``session`` is given.
        """
        op = self.inner_optimizer.reload_model_params()
        if op is not None and session is not None:
            session.run(op)
        return op

    def _stat(self, key):
        stats = self._eager_stats if tf.executing_eagerly() else self._stats.get(
            tf.compat.v1.get_default_graph(), {})
        if key not in stats:
            raise RuntimeError("%s exists once the train op is built: call minimize() or "
                               "apply_gradients() first" % key)
        return stats[key]

    @property
    def grad_norm(self):
        """float32 global L2 norm of the unscaled gradients of the last step built here.

        NaN on a skipped (overflowed) step. With ``is_distributed`` and Horovod it is the norm of
        the averaged gradients that every rank applies.
        """
        return self._stat("grad_norm")

    @property
    def num_zeros_in_grad(self):
        """int64 count of zero gradient entries of the last step built (-1 on a skipped step).

        None unless ``log_num_zeros_in_grad=True``.
        """
        if not self._log_num_zeros:
            return None
        return self._stat("num_zeros_in_grad")

    # -- building the step ------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = [(g, v) for g, v in grads_and_vars]
        # Main copies are created here, outside the finite branch's tf.cond.
        self.inner_optimizer.build_main_params([v for g, v in grads_and_vars if g is not None])
        grads = [g for g, _ in grads_and_vars if g is not None]
        with tf.name_scope("grad_stats"):
            norm = global_norm(grads)
            zeros = count_zeros(grads) if self._log_num_zeros else None
        train_op = super().apply_gradients(grads_and_vars, global_step=global_step, name=name)
        try:
            finite = self.overflow_status_reduce_all
        except RuntimeError:      # the manager turned the overflow check off
            finite = tf.constant(True)
        with tf.name_scope("grad_stats"):
            stats = {"grad_norm": where(finite, norm, tf.constant(float("nan"), tf.float32),
                                           name="grad_norm")}
            if zeros is not None:
                stats["num_zeros_in_grad"] = where(finite, zeros, tf.constant(-1, tf.int64),
                                                      name="num_zeros_in_grad")
        if tf.executing_eagerly():
            self._eager_stats = stats
        else:
            self._stats[tf.compat.v1.get_default_graph()] = stats
            if self._summaries:
                with tf.name_scope(SUMMARY_SCOPE + "/"):
                    tf.compat.v1.summary.scalar("grad_norm", stats["grad_norm"])
                    if zeros is not None:
                        tf.compat.v1.summary.scalar(
                            "num_zeros_in_grad", tf.cast(stats["num_zeros_in_grad"], tf.float32))
        return train_op


__all__ = ["MegatronMixedPrecisionOptimizer", "MegatronGradientProcessor", "global_norm",
           "count_zeros"]
