"""Keras side of ``npu_distributed_keras_optimizer_wrapper`` (Keras 2 and Keras 3).

The wrapper keeps the optimizer object (its class, variables, checkpoints and config stay what
they were) and replaces, on that object only, the method through which gradients reach it:

* Keras 3 (``keras.optimizers.Optimizer``): ``apply(grads, trainable_variables)``. Its
  ``apply_gradients``, ``model.fit``, and a ``LossScaleOptimizer`` whose inner optimizer it is
  all go through ``apply``; a ``LossScaleOptimizer`` that is itself wrapped gets the scaled
  gradients reduced before it checks and unscales them.
* Keras 2 (``tf.keras.optimizers.Optimizer`` of TF <= 2.15, and the legacy ones):
  ``apply_gradients(grads_and_vars, ...)``, which ``minimize``, ``model.fit`` and Keras 2's
  ``LossScaleOptimizer`` (for its inner optimizer) call.

Around a loss-scale optimizer that agrees on overflow across ranks (npu_device's
``NpuLossScaleOptimizer`` does at several ranks) every rank takes the same branch, so the
gradient all-reduce inside its apply branch runs on every rank or on none.
"""
import tensorflow as tf

from npu_loss_scale._internal.compat.keras import is_keras3

MARK = "_npu_device_all_reduced_gradients"


def keras_optimizer(optimizer, what="npu_distributed_keras_optimizer_wrapper"):
    """``optimizer`` as Keras resolves it (an instance, a name such as ``"adam"``, a config);
    ``what`` names the caller in errors."""
    try:
        resolved = tf.keras.optimizers.get(optimizer)
    except (ValueError, TypeError) as err:
        raise TypeError("%s: optimizer must be a Keras optimizer, or a name or config "
                        "tf.keras.optimizers.get accepts (for example tf.keras.optimizers.Adam() "
                        "or 'adam'); got %r (type %s)"
                        % (what, optimizer, type(optimizer).__name__)) from err
    if is_keras3():
        ok = callable(getattr(resolved, "apply", None))
    else:
        ok = callable(getattr(resolved, "apply_gradients", None))
    if not ok:
        raise TypeError("%s: optimizer must be a Keras optimizer; %r resolved to %r (type %s)"
                        % (what, optimizer, resolved, type(resolved).__name__))
    return resolved


def all_reduce_gradients(optimizer, reduction, all_reduce):
    """``optimizer`` with its gradients passed through ``all_reduce(grads, reduction)`` first."""
    if getattr(optimizer, MARK, None) is not None:
        return optimizer  # already wrapped: reducing twice would only repeat the collectives
    if is_keras3():
        original = optimizer.apply

        def apply(grads, trainable_variables=None):
            return original(all_reduce(list(grads), reduction), trainable_variables)

        optimizer.apply = apply
    else:
        original = optimizer.apply_gradients

        def apply_gradients(grads_and_vars, *args, **kwargs):
            pairs = list(grads_and_vars)
            grads = all_reduce([g for g, _ in pairs], reduction)
            return original(list(zip(grads, [v for _, v in pairs])), *args, **kwargs)

        optimizer.apply_gradients = apply_gradients
    setattr(optimizer, MARK, reduction)
    return optimizer
