"""TensorFlow 2.4 names that later TensorFlow dropped, for scripts written against them.

Ascend's TF2 adapter ran TensorFlow 2.4 (and 2.6), and its users' TF2 scripts — model-garden
code, the adapter's own ``npu_ops.py`` copied into each model — read names TF 2.15 no longer
has. ``python -m npu_loss_scale.emulate`` (TF2 scripts and ``--tf1`` alike) adds them back with
:func:`enable`; each is added only where the running TensorFlow lacks it:

* ``Graph._last_id`` (:func:`add_graph_last_id`): the id of the last operation added to a graph.
  ``npu_ops.py``'s ``get_seed`` reads it as the op seed of the dropout when a global seed is set.
* ``tf.keras.mixed_precision.experimental`` (:func:`add_keras_mixed_precision_experimental`):
  ``Policy(name, loss_scale="auto")``, ``set_policy``, ``global_policy``, ``get_layer_policy``
  and ``LossScaleOptimizer(optimizer, loss_scale)``, the experimental mixed-precision API of TF
  2.0-2.8 (and of TF 1.14/1.15's ``tf.keras``), which TF 2.9 removed (the stable API of TF 2.4
  on, ``set_global_policy`` and friends, behaves the same). Model-garden code sets its dtype
  policy through it whatever the dtype (``set_policy("float32")`` included).
"""
import types

# TF 2.4's ``Policy(name, loss_scale="auto")``: the loss scale ``compile()`` wraps the optimizer
# with; "auto" is dynamic for mixed_float16 and none otherwise
_AUTO = "auto"


def add_graph_last_id():
    """Gives TensorFlow's ``Graph`` (and so ``FuncGraph``) TF 2.4's private ``_last_id``: the id
    of the last operation added, that is the number of operations added so far (TF 2.4 numbered
    them from 1), which ``Graph.version`` still returns. Ascend's ``npu_ops.py`` (copied into 24
    ModelZoo-TensorFlow files, six of the seven TF2 loss-scale model directories among them)
    takes it as the op seed in ``get_seed`` when a global seed is set (``tf.random.set_seed``);
    TF 2.15 and 2.21 graphs have no such attribute, so the script's first dropout raised
    AttributeError. Idempotent; a TensorFlow that has the attribute keeps its own."""
    from tensorflow.python.framework import ops  # pylint: disable=import-outside-toplevel
    if not hasattr(ops.Graph, "_last_id"):
        ops.Graph._last_id = property(lambda graph: graph.version,  # pylint: disable=protected-access
                                      doc="TF 2.4's Graph._last_id (npu_loss_scale.emulate)")


def _policy(stable):
    def Policy(name, loss_scale=_AUTO):  # pylint: disable=invalid-name
        """TF 2.4's experimental ``Policy``: the stable policy of ``name``, with the
        ``loss_scale`` it was given as an attribute (``"auto"``: ``"dynamic"`` for
        ``mixed_float16``, else None). Keras's ``compile()`` wraps the optimizer of a
        ``mixed_float16`` model in a dynamic ``LossScaleOptimizer`` whatever it says."""
        policy = stable.Policy(name)
        if loss_scale == _AUTO:
            loss_scale = "dynamic" if policy.name == "mixed_float16" else None
        policy.loss_scale = loss_scale
        return policy
    return Policy


def _loss_scale_optimizer(stable, keras3):
    def LossScaleOptimizer(optimizer, loss_scale):  # pylint: disable=invalid-name
        """TF 2.4's experimental ``LossScaleOptimizer(optimizer, loss_scale)``: ``"dynamic"``
        (Keras's dynamic scale from 2**15) or a number (that fixed scale; Keras 2 only)."""
        if isinstance(loss_scale, str):
            if loss_scale != "dynamic":
                raise ValueError('loss_scale must be "dynamic" or a number; got %r'
                                 % (loss_scale,))
            return stable.LossScaleOptimizer(optimizer)
        if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)):
            raise TypeError('loss_scale must be "dynamic" or a number (a LossScale object is '
                            'not emulated); got %r (type %s)'
                            % (loss_scale, type(loss_scale).__name__))
        if keras3:
            raise NotImplementedError(
                "tf.keras.mixed_precision.experimental.LossScaleOptimizer with a fixed loss "
                "scale (%r): Keras 3's LossScaleOptimizer has no fixed scale" % (loss_scale,))
        return stable.LossScaleOptimizer(optimizer, dynamic=False, initial_scale=loss_scale)
    return LossScaleOptimizer


def _experimental(stable):
    """The ``experimental`` module for the stable mixed-precision module ``stable``."""
    keras3 = hasattr(stable, "DTypePolicy")
    module = types.ModuleType(stable.__name__ + ".experimental",
                              "TF 2.4's tf.keras.mixed_precision.experimental "
                              "(npu_loss_scale.ascend.tf24)")
    module.Policy = _policy(stable)
    module.set_policy = stable.set_global_policy
    module.global_policy = stable.global_policy
    module.get_layer_policy = lambda layer: layer.dtype_policy
    module.LossScaleOptimizer = _loss_scale_optimizer(stable, keras3)
    return module


def add_keras_mixed_precision_experimental():
    """``tf.keras.mixed_precision.experimental`` (and ``tf.compat.v1.keras``'s, for TF1 mode)
    where Keras no longer has it (TF 2.9 and later). Idempotent."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    stable = tf.keras.mixed_precision
    if not hasattr(stable, "set_global_policy"):
        return  # a Keras without the stable API: nothing to map to
    targets = [stable]
    try:
        targets.append(tf.compat.v1.keras.mixed_precision)
    except (AttributeError, ImportError):  # Keras 3: no tf.compat.v1.keras (it needs tf_keras)
        pass
    for module in targets:
        if not hasattr(module, "experimental"):
            module.experimental = _experimental(stable)


def enable():
    """Adds every name of this module's docstring that the running TensorFlow lacks."""
    add_graph_last_id()
    add_keras_mixed_precision_experimental()


__all__ = [
    "add_graph_last_id", "add_keras_mixed_precision_experimental", "enable",
]
