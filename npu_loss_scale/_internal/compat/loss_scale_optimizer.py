"""The classes the package's optimizer and managers build on.

TensorFlow 2.x: ``tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`` and its
``LossScale``. TensorFlow 1.15 has no ``tf.compat.v1.mixed_precision``; there Ascend's TF1
adapter subclasses ``tf.contrib.mixed_precision.LossScaleOptimizer`` and its managers subclass
contrib's ``LossScaleManager``, so the package does the same: a script that reads the base
class's attributes (``_opt``, ``_loss_scale_manager``) or checks ``isinstance`` against contrib
keeps working. On 1.15 the base below adds to contrib's class the few methods of TensorFlow 2's
class that the package's optimizer calls, so the optimizer itself is written once.

Names:

* ``LossScaleOptimizerBase``: the class :class:`~npu_loss_scale.NPULossScaleOptimizer`
  subclasses; constructed as ``(opt, manager)``; provides ``_optimizer``, ``_loss_scale()``,
  ``_scale_loss``, ``_unscale_grads``, ``_apply_gradients(distribution, grads_and_vars,
  global_step, name)``.
* ``MANAGER_BASES``: the bases of :class:`~npu_loss_scale.LossScaleManager` (TensorFlow's
  ``LossScale``, plus contrib's ``LossScaleManager`` on 1.15).
* ``CONTRIB``: True where ``tf.contrib.mixed_precision`` is the base (TensorFlow 1.x).
"""
import tensorflow as tf

CONTRIB = not hasattr(tf.compat.v1, "mixed_precision")

if not CONTRIB:
    LossScaleOptimizerBase = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer
    MANAGER_BASES = (tf.compat.v1.mixed_precision.LossScale,)
else:
    # pylint: disable=import-error,no-name-in-module
    from tensorflow.contrib.mixed_precision.python import loss_scale_manager as _contrib_lsm
    from tensorflow.contrib.mixed_precision.python import loss_scale_optimizer as _contrib_lso
    # pylint: enable=import-error,no-name-in-module

    MANAGER_BASES = (tf.compat.v1.train.experimental.LossScale, _contrib_lsm.LossScaleManager)

    class LossScaleOptimizerBase(_contrib_lso.LossScaleOptimizer):
        """contrib's ``LossScaleOptimizer`` with the internal calls of TensorFlow 2's class.

        contrib's ``__init__`` stores ``_opt`` and ``_loss_scale_manager`` and skips the
        ``Optimizer`` constructor; this one runs it too (name, locking, slots and checkpoint
        tracking of a real optimizer), and tracks the wrapped optimizer and the manager as
        TensorFlow 2's class does.
        """

        def __init__(self, opt, loss_scale):  # pylint: disable=super-init-not-called
            _contrib_lso.LossScaleOptimizer.__init__(self, opt, loss_scale)
            tf.compat.v1.train.Optimizer.__init__(
                self, opt._use_locking, opt.get_name())  # pylint: disable=protected-access
            self._optimizer = opt
            self._loss_scale = loss_scale
            self._track_trackable(opt, "base_optimizer")
            self._track_trackable(loss_scale, "loss_scale")

        def _scale_loss(self, loss):
            scale = self._loss_scale()
            if callable(loss):
                def scaled():
                    value = loss()
                    return value * tf.cast(scale, value.dtype)
                return scaled
            return loss * tf.cast(scale, loss.dtype)

        def _unscale_grads(self, grads):
            reciprocal = 1 / self._loss_scale()
            return [None if g is None else self._scale_grad(g, reciprocal) for g in grads]

        def _apply_gradients(self, distribution, grads_and_vars, global_step, name):
            """The inner optimizer's apply, in every replica (one replica outside a strategy)."""
            ops = distribution.extended.call_for_each_replica(
                self._optimizer.apply_gradients, args=(grads_and_vars, global_step, name))
            return distribution.group(ops)

        def _apply_dense(self, grad, var):
            raise RuntimeError("the wrapped optimizer applies the gradients")

        _apply_sparse = _resource_apply_dense = _apply_dense

        def _resource_apply_sparse(self, grad, handle, indices):
            raise RuntimeError("the wrapped optimizer applies the gradients")
