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
from npu_loss_scale._internal.compat.ops import where
from npu_loss_scale.optimizers.loss_scale import SUMMARY_SCOPE, NPULossScaleOptimizer
from npu_loss_scale.optimizers.megatron_gradients import MegatronGradientProcessor, \
    count_zeros, global_norm
from npu_loss_scale.scaling.base import LossScaleManager
from npu_loss_scale.scaling.megatron import ConstantGradScaler


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
