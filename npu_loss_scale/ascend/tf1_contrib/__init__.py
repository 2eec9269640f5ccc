"""``tf.contrib`` for user code in TF1 mode: the pieces Ascend loss-scale scripts use most.

Measured on the loss-scale model directories of ModelZoo-TensorFlow (directories using each):
``data.map_and_batch`` 26, ``layers.xavier_initializer`` 26, ``data.parallel_interleave`` 24,
``data.AUTOTUNE`` 24, ``layers.layer_norm`` 20, ``slim`` 19, ``layers.variance_scaling_initializer``
12, ``layers.l2_regularizer`` 8, ``tpu.*`` 15-20 (TPU estimators run with ``use_tpu=False``).
Each mapped name is TF 2.x's equivalent with TF 1.15's arguments; ``slim`` is the maintained
``tf_slim`` package when it is installed. Any other name raises an AttributeError that names it.

Other pieces, each a TF 2.x equivalent, a maintained successor or a few lines on TF 2.x ops
written here (no code of TF 1.15's contrib):

* ``layers.*`` names not listed above (``batch_norm``, ``fully_connected``, ``conv2d``,
  ``flatten``, ``xavier_initializer_conv2d``, ``optimize_loss``...): ``tf_slim.layers``, whose
  functions are contrib.layers' under their old names;
* ``framework``: ``nest`` (``tf.nest``, and ``is_sequence``, 1.15's name of ``is_nested``),
  ``get_or_create_global_step``, ``list_variables``, ``load_checkpoint``, ``get_name_scope``,
  then ``tf_slim``'s variable and arg-scope helpers
  (``arg_scope``, ``add_arg_scope``, ``get_variables_to_restore``, ``assign_from_checkpoint_fn``);
* ``rnn``: ``tf.compat.v1.nn.rnn_cell``'s cells (``LSTMCell``, ``GRUCell``, ``MultiRNNCell``,
  ``DropoutWrapper``, ``LSTMStateTuple``...), ``static_rnn``, ``static_bidirectional_rnn`` (TF
  2.15; TF 2.21's Keras 3 has no v1 cells, so there these names raise the not-mapped error);
* ``training.HParams``: :class:`HParams`, a hyper-parameter container with TF 1.15's methods;
* ``tpu``: TF 1.15's contrib.tpu re-exported the TPU estimator and the v1 TPU functions; here
  ``RunConfig``, ``TPUConfig``, ``TPUEstimator``, ``TPUEstimatorSpec``, ``InputPipelineConfig``
  are ``tf.compat.v1.estimator.tpu``'s (``tensorflow-estimator``, TF <= 2.15; without it they
  raise an error saying so), other names ``tf.compat.v1.tpu``'s (``CrossShardOptimizer``...).
  BERT-style scripts build a ``TPUEstimator(use_tpu=False)``, which runs as an Estimator on CPU;
  ``cluster_resolver``: ``tf.distribute.cluster_resolver``;
* modules GNMT-style scripts import at their top: ``compiler.xla`` (TF 2.x's
  ``tensorflow.python.compiler.xla.xla``, which 1.15's contrib re-exported), ``framework.python.
  framework.tensor_util.with_same_shape`` (:func:`with_same_shape`), ``cudnn_rnn``'s direction
  constants (``CudnnLSTM`` itself, a GPU kernel, is not mapped), ``all_reduce.python.all_reduce``
  (an empty module: its multi-GPU builders are not mapped and raise naming themselves);
* ``learn.ModeKeys`` (contrib.learn's ``"train"``/``"eval"``/``"infer"``),
  ``learn.monitors.replace_monitors_with_hooks`` (hooks pass through; monitors are not mapped:
  :func:`replace_monitors_with_hooks`), ``eager.in_eager_mode`` (``tf.executing_eagerly``) and
  ``util``
  (``constant_value`` is ``tf.get_static_value``, ``make_tensor_proto``, ``make_ndarray``);
* ``seq2seq``: what scripts carrying their own decoders need of it: the ``Decoder`` interface
  (:class:`Decoder`) they subclass, ``tile_batch`` and ``hardmax`` (:func:`tile_batch`,
  :func:`hardmax`); ``dynamic_decode``, ``gather_tree`` (a custom kernel), the helpers and
  decoders are not mapped;
* ``nn.conv1d_transpose``: ``tf.nn.conv1d_transpose`` (TF 1.15's contrib re-exported the core
  function, ``strides`` and all);
* ``distributions.percentile`` (:func:`percentile`: TF 1.15's sampled percentile, no
  distribution classes);
* ``image.transform``, ``translate``, ``rotate`` (and the ``translations_to_``/
  ``angles_to_projective_transforms`` helpers): TF 2.x's ``ImageProjectiveTransformV2`` op, the
  kernel contrib's functions ran, with their arguments and zero fill (``compose_transforms``,
  ``dense_image_warp`` are not mapped);
* ``mixed_precision`` (and its ``python.loss_scale_manager``/``loss_scale_optimizer`` modules):
  this package's loss-scale managers and an inf/NaN-checking ``LossScaleOptimizer``
  (:func:`_mixed_precision`).

Module paths (``import tensorflow.contrib.slim as slim``, ``from tensorflow.contrib.layers.python.
layers import utils``) resolve through :func:`resolve_module`: the namespaces above, and
``tensorflow.contrib.slim[.nets|.python.slim.nets]``, ``...layers.python.layers`` to the
matching ``tf_slim`` modules, ``...framework.python.ops`` to ``tf_slim``'s arg-scope and variable
helpers. The pre-``npu_bridge`` location
of the Ascend adapter, ``tensorflow.contrib.offline_train.python.npu`` (and ``...python.npu_ops``,
``tensorflow.contrib.hccl.python.ops``), resolves to the ``npu_bridge`` modules of the same
contents (the CPU shim under the emulator).
"""
import tensorflow as tf

from npu_loss_scale.ascend.tf1_contrib._namespace import _Namespace, _ns
from npu_loss_scale.ascend.tf1_contrib.data import map_and_batch, parallel_interleave
from npu_loss_scale.ascend.tf1_contrib.distributions import percentile
from npu_loss_scale.ascend.tf1_contrib.framework import (
    _cudnn_rnn, _nest, _rnn_cell, _v1_nn, _xla_module, replace_monitors_with_hooks, with_same_shape)
from npu_loss_scale.ascend.tf1_contrib.hparams import HParams
from npu_loss_scale.ascend.tf1_contrib.image import (
    angles_to_projective_transforms, rotate, transform, translate,
    translations_to_projective_transforms)
from npu_loss_scale.ascend.tf1_contrib.layers import (
    _slim, _slim_layers, _slim_ops, _slim_top, l2_regularizer, layer_norm,
    variance_scaling_initializer, xavier_initializer)
from npu_loss_scale.ascend.tf1_contrib.seq2seq import Decoder, hardmax, tile_batch
from npu_loss_scale.ascend.tf1_contrib.tpu import _tpu
from npu_loss_scale.ascend.tf1_contrib.modules import resolve_module  # noqa: F401


def _mixed_precision():
    """``tf.contrib.mixed_precision``: TF 1.15's loss-scale managers and optimizer.

    The managers are this package's (the same arguments and defaults as contrib's, which
    Ascend's were made from). contrib's ``LossScaleOptimizer(opt, loss_scale_manager)`` checks the
    gradients themselves for inf/NaN and skips the update when any is not finite, whatever the
    manager: :class:`npu_loss_scale.NPULossScaleOptimizer` with ``backend="inf_nan"``, which
    behaves so (and warns when the emulated device saturates instead of producing inf/NaN, as
    contrib's optimizer on the device would not see those overflows either).
    """
    from npu_loss_scale.optimizers import loss_scale  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.scaling import (  # pylint: disable=import-outside-toplevel
        managers as scaling)

    class LossScaleOptimizer(loss_scale.NPULossScaleOptimizer):
        """``tf.contrib.mixed_precision.LossScaleOptimizer``: gradients checked for inf/NaN."""

        def __init__(self, opt, loss_scale_manager):
            super().__init__(opt, loss_scale_manager, backend="inf_nan")

    managers = dict(LossScaleManager=scaling.LossScaleManager,
                    FixedLossScaleManager=scaling.FixedLossScaleManager,
                    ExponentialUpdateLossScaleManager=scaling.ExponentialUpdateLossScaleManager)
    path = "tensorflow.contrib.mixed_precision.python"
    python = _ns(path,
                 loss_scale_manager=_ns(path + ".loss_scale_manager", **managers),
                 loss_scale_optimizer=_ns(path + ".loss_scale_optimizer",
                                          LossScaleOptimizer=LossScaleOptimizer))
    return _ns("tf.contrib.mixed_precision", python=python,
               LossScaleOptimizer=LossScaleOptimizer, **managers)


class _Contrib(_Namespace):
    def __getattr__(self, name):
        if name == "slim":
            slim = _slim()
            if slim is None:
                raise AttributeError("tf.contrib.slim maps to the tf_slim package, which is not "
                                     "installed (pip install tf-slim)")
            return slim
        return super().__getattr__(name)


def contrib():
    """The ``tf.contrib`` namespace handed to user code in TF1 mode."""
    v1 = tf.compat.v1
    layers = _ns("tf.contrib.layers", _slim_layers, xavier_initializer=xavier_initializer,
                 variance_scaling_initializer=variance_scaling_initializer,
                 l2_regularizer=l2_regularizer, layer_norm=layer_norm)
    out = _Contrib(
        data=_ns("tf.contrib.data", map_and_batch=map_and_batch,
                 parallel_interleave=parallel_interleave, AUTOTUNE=tf.data.experimental.AUTOTUNE),
        layers=layers,
        framework=_ns("tf.contrib.framework", _slim_top, nest=_nest(),
                      get_or_create_global_step=v1.train.get_or_create_global_step,
                      list_variables=tf.train.list_variables,
                      load_checkpoint=tf.train.load_checkpoint,
                      get_name_scope=lambda: v1.get_default_graph().get_name_scope()),
        rnn=_ns("tf.contrib.rnn", _rnn_cell, **{
            name: _v1_nn(name) for name in ("static_rnn", "static_bidirectional_rnn")
            if _v1_nn(name) is not None}),
        training=_ns("tf.contrib.training", HParams=HParams),
        tpu=_tpu(),
        compiler=_ns("tf.contrib.compiler",
                     xla=(_xla_module() or [_ns("tf.contrib.compiler.xla")])[0]),
        cudnn_rnn=_cudnn_rnn(),
        learn=_ns("tf.contrib.learn", ModeKeys=_ns("tf.contrib.learn.ModeKeys", TRAIN="train",
                                                   EVAL="eval", INFER="infer"),
                  monitors=_ns("tf.contrib.learn.monitors",
                               replace_monitors_with_hooks=replace_monitors_with_hooks)),
        eager=_ns("tf.contrib.eager", in_eager_mode=tf.executing_eagerly,
                  executing_eagerly=tf.executing_eagerly),
        util=_ns("tf.contrib.util", constant_value=tf.get_static_value,
                 make_tensor_proto=tf.make_tensor_proto, make_ndarray=tf.make_ndarray),
        seq2seq=_ns("tf.contrib.seq2seq", Decoder=Decoder, tile_batch=tile_batch,
                    hardmax=hardmax),
        all_reduce=_ns("tf.contrib.all_reduce", python=_ns(
            "tensorflow.contrib.all_reduce.python",
            all_reduce=_ns("tensorflow.contrib.all_reduce.python.all_reduce"))),
        cluster_resolver=_ns("tf.contrib.cluster_resolver",
                             lambda: [tf.distribute.cluster_resolver]),
        nn=_ns("tf.contrib.nn", conv1d_transpose=tf.nn.conv1d_transpose),
        distributions=_ns("tf.contrib.distributions", percentile=percentile),
        image=_ns("tf.contrib.image", transform=transform, translate=translate, rotate=rotate,
                  translations_to_projective_transforms=translations_to_projective_transforms,
                  angles_to_projective_transforms=angles_to_projective_transforms),
        mixed_precision=_mixed_precision())
    framework_ops = _ns("tensorflow.contrib.framework.python.ops", _slim_ops)
    tensor_util = _ns("tensorflow.contrib.framework.python.framework.tensor_util",
                      with_same_shape=with_same_shape, is_tensor=tf.is_tensor)
    object.__setattr__(out.framework, "python", _ns(
        "tensorflow.contrib.framework.python", ops=framework_ops,
        framework=_ns("tensorflow.contrib.framework.python.framework", tensor_util=tensor_util)))
    object.__setattr__(out, "_path", "tf.contrib")
    return out


__all__ = [
    "map_and_batch",
    "parallel_interleave",
    "xavier_initializer",
    "variance_scaling_initializer",
    "l2_regularizer",
    "layer_norm",
    "percentile",
    "transform",
    "translations_to_projective_transforms",
    "angles_to_projective_transforms",
    "translate",
    "rotate",
    "HParams",
    "resolve_module",
    "with_same_shape",
    "replace_monitors_with_hooks",
    "Decoder",
    "tile_batch",
    "hardmax",
    "contrib",
]
