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
import abc
import importlib
import json
import types

import tensorflow as tf


class _Namespace(types.SimpleNamespace):
    _path = "tf.contrib"
    _fallback = None  # a function returning the modules to look a name up in, in order

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        fallback = object.__getattribute__(self, "_fallback")
        if fallback is not None and not name.startswith("_"):
            for module in fallback():
                if module is not None and hasattr(module, name):
                    return getattr(module, name)
        raise AttributeError("%s.%s is not mapped to TensorFlow 2 by the TF1 mode of "
                             "npu_loss_scale.emulate" % (object.__getattribute__(self, "_path"),
                                                         name))


def _ns(path, fallback=None, **names):
    ns = _Namespace(**names)
    object.__setattr__(ns, "_path", path)
    object.__setattr__(ns, "_fallback", fallback)
    return ns


# -- data --------------------------------------------------------------------------------------
def map_and_batch(map_func, batch_size, num_parallel_batches=None, drop_remainder=False,
                  num_parallel_calls=None):
    """``dataset.apply(map_and_batch(f, n))``: map then batch, as the fused TF 1 op did."""
    calls = num_parallel_calls or num_parallel_batches

    def apply(dataset):
        return dataset.map(map_func, num_parallel_calls=calls).batch(
            batch_size, drop_remainder=drop_remainder)

    return apply


def parallel_interleave(map_func, cycle_length, block_length=1, sloppy=False,
                        buffer_output_elements=None, prefetch_input_elements=None):  # pylint: disable=unused-argument
    """``dataset.apply(parallel_interleave(f, n))``: ``interleave`` with parallel calls."""

    def apply(dataset):
        return dataset.interleave(map_func, cycle_length=cycle_length, block_length=block_length,
                                  num_parallel_calls=cycle_length, deterministic=not sloppy)

    return apply


# -- layers ------------------------------------------------------------------------------------
def xavier_initializer(uniform=True, seed=None, dtype=tf.float32):
    if uniform:
        return tf.compat.v1.glorot_uniform_initializer(seed=seed, dtype=dtype)
    return tf.compat.v1.glorot_normal_initializer(seed=seed, dtype=dtype)


def variance_scaling_initializer(factor=2.0, mode="FAN_IN", uniform=False, seed=None,
                                 dtype=tf.float32):
    modes = {"FAN_IN": "fan_in", "FAN_OUT": "fan_out", "FAN_AVG": "fan_avg"}
    if mode not in modes:
        raise ValueError("mode must be one of FAN_IN, FAN_OUT, FAN_AVG; got %r" % (mode,))
    return tf.compat.v1.variance_scaling_initializer(
        scale=factor, mode=modes[mode],
        distribution="uniform" if uniform else "truncated_normal", seed=seed, dtype=dtype)


def l2_regularizer(scale, scope=None):
    if scale < 0:
        raise ValueError("scale must be >= 0; got %r" % (scale,))

    def l2(weights):
        with tf.compat.v1.name_scope(scope, "l2_regularizer", [weights]):
            return tf.cast(scale, weights.dtype) * tf.nn.l2_loss(weights)

    return l2


# -- distributions ---------------------------------------------------------------------------
def percentile(x, q, axis=None, interpolation=None, keep_dims=False, validate_args=False,
               name=None):
    """``tf.contrib.distributions.percentile``: the ``q``-th percentile (scalar ``q`` in [0, 100])
    of ``x`` over ``axis`` (all axes when None; a static rank is needed), as TF 1.15 computed it:
    a sample of the sorted values, ``interpolation`` ``"nearest"`` (default, ties to even),
    ``"lower"`` or ``"higher"``; gradients flow to the sampled elements."""
    del validate_args  # TF 1.15 only added assertions on q's range
    interpolation = interpolation or "nearest"
    pick = {"lower": tf.math.ceil, "higher": tf.math.floor, "nearest": tf.math.round}
    if interpolation not in pick:
        raise ValueError("tf.contrib.distributions.percentile: interpolation must be one of "
                         "'lower', 'higher', 'nearest'; got %r" % (interpolation,))
    with tf.name_scope(name or "percentile"):
        x = tf.convert_to_tensor(x)
        ndims = x.shape.ndims
        if ndims is None:
            raise ValueError("tf.contrib.distributions.percentile needs x of a static rank")
        if axis is None:
            axes = list(range(ndims))
        else:
            axes = [int(a) for a in ([axis] if isinstance(axis, int) else list(axis))]
            axes = [a + ndims if a < 0 else a for a in axes]
        front = [i for i in range(ndims) if i not in axes]
        y = tf.transpose(x, front + axes)
        y = tf.reshape(y, tf.concat([tf.shape(y)[:len(front)], [-1]], axis=0))
        count = tf.cast(tf.shape(y)[-1], tf.float32)
        # the index counted from the largest value, as TF 1.15 did (so "lower" rounds it up)
        index = pick[interpolation]((count - 1.0) * (1.0 - tf.cast(q, tf.float32) / 100.0))
        descending = tf.nn.top_k(y, k=tf.shape(y)[-1]).values
        result = tf.gather(descending, tf.cast(index, tf.int32), axis=-1)
        if keep_dims:
            for a in sorted(axes):
                result = tf.expand_dims(result, a)
        return result


# -- image -------------------------------------------------------------------------------------
def _as_batch(images):
    """``images`` (HW, HWC or NHWC) as NHWC, and a function giving a result its original rank."""
    images = tf.convert_to_tensor(images)
    rank = images.shape.ndims
    if rank == 2:
        return images[None, :, :, None], lambda out: out[0, :, :, 0]
    if rank == 3:
        return images[None], lambda out: out[0]
    if rank == 4:
        return images, lambda out: out
    raise ValueError("tf.contrib.image: images must be of rank 2, 3 or 4; got shape %s"
                     % images.shape)


def transform(images, transforms, interpolation="NEAREST", output_shape=None, name=None):
    """``tf.contrib.image.transform``: projective transforms ``[a0, a1, a2, b0, b1, b2, c0, c1]``
    (one, or one per image) mapping output points to input points; outside points are 0."""
    with tf.name_scope(name or "transform"):
        batch, restore = _as_batch(images)
        transforms = tf.convert_to_tensor(transforms, tf.float32)
        if transforms.shape.ndims == 1:
            transforms = transforms[None]
        if output_shape is None:
            output_shape = tf.shape(batch)[1:3]
        out = tf.raw_ops.ImageProjectiveTransformV2(
            images=batch, transforms=transforms,
            output_shape=tf.convert_to_tensor(output_shape, tf.int32),
            interpolation=interpolation.upper(), fill_mode="CONSTANT")
        return restore(out)


def translations_to_projective_transforms(translations, name=None):
    """``[dx, dy]`` (or one per image) as the transforms moving an image right by dx, down by
    dy."""
    with tf.name_scope(name or "translations_to_projective_transforms"):
        translations = tf.convert_to_tensor(translations, tf.float32)
        if translations.shape.ndims == 1:
            translations = translations[None]
        n = tf.shape(translations)[0]
        ones, zeros = tf.ones([n, 1]), tf.zeros([n, 1])
        return tf.concat([ones, zeros, -translations[:, :1], zeros, ones, -translations[:, 1:2],
                          zeros, zeros], axis=1)


def angles_to_projective_transforms(angles, image_height, image_width, name=None):
    """The transforms rotating images counter-clockwise by ``angles`` (radians) about their
    centres."""
    with tf.name_scope(name or "angles_to_projective_transforms"):
        angles = tf.convert_to_tensor(angles, tf.float32)
        if angles.shape.ndims == 0:
            angles = angles[None]
        h = tf.cast(image_height, tf.float32) - 1.0
        w = tf.cast(image_width, tf.float32) - 1.0
        cos, sin = tf.cos(angles), tf.sin(angles)
        x_offset = (w - (cos * w - sin * h)) / 2.0
        y_offset = (h - (sin * w + cos * h)) / 2.0
        zeros = tf.zeros_like(angles)
        return tf.stack([cos, -sin, x_offset, sin, cos, y_offset, zeros, zeros], axis=1)


def translate(images, translations, interpolation="NEAREST", name=None):
    """``tf.contrib.image.translate``: shift by ``[dx, dy]`` pixels, filling with 0."""
    with tf.name_scope(name or "translate"):
        return transform(images, translations_to_projective_transforms(translations),
                         interpolation=interpolation)


def rotate(images, angles, interpolation="NEAREST", name=None):
    """``tf.contrib.image.rotate``: rotate counter-clockwise by ``angles`` radians (one, or one
    per image) about the centre, filling with 0."""
    with tf.name_scope(name or "rotate"):
        batch, restore = _as_batch(images)
        shape = tf.shape(batch)
        return restore(transform(batch, angles_to_projective_transforms(angles, shape[1],
                                                                        shape[2]),
                                 interpolation=interpolation))


def layer_norm(inputs, center=True, scale=True, activation_fn=None, reuse=None,
               variables_collections=None, outputs_collections=None, trainable=True,  # pylint: disable=unused-argument
               begin_norm_axis=1, begin_params_axis=-1, scope=None):
    """TF 1.15's ``tf.contrib.layers.layer_norm`` (variables ``LayerNorm/beta``, ``gamma``)."""
    with tf.compat.v1.variable_scope(scope, "LayerNorm", [inputs], reuse=reuse):
        inputs = tf.convert_to_tensor(inputs)
        rank = inputs.shape.rank
        begin_norm_axis %= rank
        begin_params_axis %= rank
        params_shape = inputs.shape[begin_params_axis:]
        beta = gamma = None
        if center:
            beta = tf.compat.v1.get_variable("beta", params_shape, inputs.dtype,
                                             initializer=tf.compat.v1.zeros_initializer(),
                                             trainable=trainable)
        if scale:
            gamma = tf.compat.v1.get_variable("gamma", params_shape, inputs.dtype,
                                              initializer=tf.compat.v1.ones_initializer(),
                                              trainable=trainable)
        mean, variance = tf.nn.moments(inputs, list(range(begin_norm_axis, rank)), keepdims=True)
        out = tf.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma,
                                        variance_epsilon=1e-12)
        return activation_fn(out) if activation_fn is not None else out


def _slim():
    try:
        import tf_slim  # pylint: disable=import-outside-toplevel
        return tf_slim
    except ImportError:
        return None


def _slim_layers():
    return [None if _slim() is None else importlib.import_module("tf_slim.layers")]


def _slim_top():
    return [_slim()]


def _slim_ops():
    """tf_slim's top level, then its ``ops`` modules (``variables``, ``arg_scope``)."""
    slim = _slim()
    if slim is None:
        return []
    ops = importlib.import_module("tf_slim.ops")
    for sub in ("variables", "arg_scope"):
        importlib.import_module("tf_slim.ops." + sub)
    return [slim, ops]


# -- training.HParams --------------------------------------------------------------------------
class HParams:
    """Named hyper-parameters, as ``tf.contrib.training.HParams`` held them.

    ``HParams(lr=0.1, layers=[2, 3])``; attribute access; ``add_hparam``, ``set_hparam``,
    ``del_hparam``, ``get``, ``values()``, ``override_from_dict``, ``parse("lr=0.2,layers=[4]")``
    (each value converted to the type the parameter has), ``to_json``/``parse_json``.
    """

    def __init__(self, hparam_def=None, model_structure=None, **kwargs):
        if hparam_def is not None:
            raise ValueError("HParams(hparam_def=...) (a protocol buffer) is not emulated; pass "
                             "the parameters as keyword arguments")
        self._names = []
        self._model_structure = model_structure
        for name, value in kwargs.items():
            self.add_hparam(name, value)

    def add_hparam(self, name, value):
        if name in self._names or name.startswith("_") or hasattr(HParams, name):
            raise ValueError("hyper-parameter name %r is taken or reserved" % (name,))
        self._names.append(name)
        setattr(self, name, value)

    def set_hparam(self, name, value):
        if name not in self._names:
            raise ValueError("no hyper-parameter %r; defined: %s" % (name, sorted(self._names)))
        setattr(self, name, value)

    def del_hparam(self, name):
        if name in self._names:
            self._names.remove(name)
            delattr(self, name)

    def get(self, key, default=None):
        return getattr(self, key) if key in self._names else default

    def values(self):
        return {name: getattr(self, name) for name in self._names}

    def override_from_dict(self, values_dict):
        for name, value in values_dict.items():
            self.set_hparam(name, value)
        return self

    @staticmethod
    def _convert(name, text, current):
        text = text.strip()
        if isinstance(current, bool):
            if text.lower() in ("true", "1"):
                return True
            if text.lower() in ("false", "0"):
                return False
            raise ValueError("hyper-parameter %s is a bool; got %r" % (name, text))
        if isinstance(current, (list, tuple)):
            items = [t for t in text.strip("[]").split(":" if ":" in text else ",") if t.strip()]
            kind = type(current[0]) if current else str
            return [HParams._convert(name, t, kind()) for t in items]
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        return text

    def parse(self, values):
        """Overrides from ``"name=value,name=[a,b],..."``; returns self."""
        if not values:
            return self
        pairs, depth, start = [], 0, 0
        for i, char in enumerate(values + ","):
            depth += {"[": 1, "]": -1}.get(char, 0)
            if char == "," and depth == 0:
                if values[start:i].strip():
                    pairs.append(values[start:i])
                start = i + 1
        for pair in pairs:
            if "=" not in pair:
                raise ValueError("HParams.parse: %r is not name=value" % (pair,))
            name, text = pair.split("=", 1)
            name = name.strip()
            if name not in self._names:
                raise ValueError("HParams.parse: no hyper-parameter %r; defined: %s"
                                 % (name, sorted(self._names)))
            self.set_hparam(name, self._convert(name, text, getattr(self, name)))
        return self

    def to_json(self, indent=None, separators=None, sort_keys=False):
        return json.dumps(self.values(), indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def parse_json(self, values_json):
        return self.override_from_dict(json.loads(values_json))

    def __contains__(self, key):
        return key in self._names

    def __repr__(self):
        return "HParams(%s)" % ", ".join("%s=%r" % kv for kv in sorted(self.values().items()))


def _rnn_cell():
    try:  # TF 2.21 (Keras 3) has no v1 RNN cells: looking them up fails with an ImportError
        return [tf.compat.v1.nn.rnn_cell]
    except (ImportError, AttributeError):
        return []


def _v1_nn(name):
    try:
        return getattr(tf.compat.v1.nn, name)
    except (ImportError, AttributeError):
        return None


# -- module paths ----------------------------------------------------------------------------------
_MODULE_PREFIXES = (  # (TF 1.15 module path prefix, module it resolves to), longest first
    ("tensorflow.contrib.slim.python.slim.nets", "tf_slim.nets"),
    ("tensorflow.contrib.slim.nets", "tf_slim.nets"),
    ("tensorflow.contrib.slim", "tf_slim"),
    ("tensorflow.contrib.layers.python.layers", "tf_slim.layers"),
    ("tensorflow.contrib.offline_train.python.npu_ops", "npu_bridge.estimator.npu_ops"),
    ("tensorflow.contrib.offline_train.python.npu", "npu_bridge.estimator.npu"),
    ("tensorflow.contrib.hccl.python.ops", "npu_bridge.hccl"),
)
_NOT_MAPPED = ("%s: tensorflow.contrib was removed in TensorFlow 2 and the TF1 mode of "
               "npu_loss_scale.emulate does not map this module")


def resolve_module(fullname, namespace):
    """The object standing for TF 1.15 module ``fullname`` (``tensorflow.contrib...``).

    ``namespace`` is the ``tf.contrib`` object handed to user code. Raises ModuleNotFoundError
    naming the module when it is not mapped (or its ``tf_slim`` target is not installed).
    """
    parts = fullname.split(".")
    if parts[:2] == ["tensorflow", "contrib"]:
        obj = namespace
        for i, part in enumerate(parts[2:], 2):
            if not isinstance(obj, _Namespace) or part not in vars(obj):
                break
            obj = getattr(obj, part)
        else:
            return obj
    for prefix, target in _MODULE_PREFIXES:
        if fullname == prefix or fullname.startswith(prefix + "."):
            name = target + fullname[len(prefix):]
            try:
                return importlib.import_module(name)
            except ModuleNotFoundError as err:
                if target.startswith("tf_slim") and err.name == "tf_slim":
                    raise ModuleNotFoundError(
                        "%s maps to %s, from the tf_slim package, which is not installed "
                        "(pip install tf-slim)" % (fullname, name), name=fullname) from err
                if err.name == name:
                    raise ModuleNotFoundError(_NOT_MAPPED % fullname, name=fullname) from err
                raise
    raise ModuleNotFoundError(_NOT_MAPPED % fullname, name=fullname)


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
    from npu_loss_scale.scaling import managers as scaling  # pylint: disable=import-outside-toplevel

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


def with_same_shape(expected_tensor, tensor):
    """contrib.framework's ``tensor_util.with_same_shape``: ``tensor``, checked to have the shape
    of ``expected_tensor`` (a ValueError when both static shapes are known and differ, else an
    assertion run with it), its static shape merged with the expected one."""
    v1 = tf.compat.v1
    tensor = v1.convert_to_tensor(tensor)
    expected_tensor = v1.convert_to_tensor(expected_tensor)
    expected, actual = expected_tensor.get_shape(), tensor.get_shape()
    if expected.is_fully_defined() and actual.is_fully_defined():
        if expected != actual:
            raise ValueError("Invalid shape for tensor %s, expected %s, got %s."
                             % (tensor.name, expected, actual))
        return tensor
    with v1.name_scope("%s/" % tensor.op.name, values=[expected_tensor, tensor]):
        check = v1.assert_equal(v1.shape(tensor), v1.shape(expected_tensor),
                                message="Wrong shape for %s" % tensor.name)
        with v1.control_dependencies([check]):
            out = v1.identity(tensor)
    out.set_shape(actual.merge_with(expected))
    return out


def _xla_module():
    try:
        return [importlib.import_module("tensorflow.python.compiler.xla.xla")]
    except ImportError:
        return []


_CUDNN_CONSTANTS = dict(CUDNN_RNN_UNIDIRECTION="unidirectional",
                        CUDNN_RNN_BIDIRECTION="bidirectional", CUDNN_LSTM="lstm",
                        CUDNN_GRU="gru", CUDNN_RNN_RELU="rnn_relu", CUDNN_RNN_TANH="rnn_tanh",
                        CUDNN_INPUT_LINEAR_MODE="linear_input",
                        CUDNN_INPUT_SKIP_MODE="skip_input", CUDNN_INPUT_AUTO_MODE="auto_select")


def _cudnn_rnn():
    """``tf.contrib.cudnn_rnn`` (and ``...python.layers.cudnn_rnn``): the constants only; the
    cuDNN layers are GPU kernels, not mapped (their names raise the not-mapped error)."""
    path = "tensorflow.contrib.cudnn_rnn.python"
    layers_module = _ns(path + ".layers.cudnn_rnn", **_CUDNN_CONSTANTS)
    python = _ns(path, layers=_ns(path + ".layers", cudnn_rnn=layers_module))
    return _ns("tf.contrib.cudnn_rnn", python=python, **_CUDNN_CONSTANTS)


class Decoder(metaclass=abc.ABCMeta):
    """``tf.contrib.seq2seq.Decoder``: the interface a decoder run step by step implements
    (``batch_size``, ``output_size``, ``output_dtype``, ``initialize``, ``step``; ``finalize``
    and ``tracks_own_finished`` optional)."""

    @property
    def batch_size(self):
        raise NotImplementedError

    @property
    @abc.abstractmethod
    def output_size(self):
        raise NotImplementedError

    @property
    @abc.abstractmethod
    def output_dtype(self):
        raise NotImplementedError

    @abc.abstractmethod
    def initialize(self, name=None):
        raise NotImplementedError

    @abc.abstractmethod
    def step(self, time, inputs, state, name=None):
        raise NotImplementedError

    def finalize(self, outputs, final_state, sequence_lengths):
        raise NotImplementedError

    @property
    def tracks_own_finished(self):
        return False


def tile_batch(t, multiplier, name=None):
    """``tf.contrib.seq2seq.tile_batch``: each batch entry of every tensor of the structure ``t``
    repeated ``multiplier`` times in place (``[a, b]`` -> ``[a, a, b, b]``), as beam search
    wants its encoder outputs."""
    v1 = tf.compat.v1
    flat = tf.nest.flatten(t)
    with v1.name_scope(name, "tile_batch", flat + [multiplier]):
        def tile(x):
            x = v1.convert_to_tensor(x, name="t")
            if x.shape.ndims is None:
                raise ValueError("t must have statically known rank")
            out = tf.repeat(x, multiplier, axis=0)
            if x.shape.ndims > 0 and x.shape[0] is not None and isinstance(multiplier, int):
                out.set_shape([x.shape[0] * multiplier] + x.shape.as_list()[1:])
            return out
        return tf.nest.map_structure(tile, t)


def hardmax(logits, name=None):
    """``tf.contrib.seq2seq.hardmax``: one-hot of the argmax over the last axis."""
    v1 = tf.compat.v1
    with v1.name_scope(name, "Hardmax", [logits]):
        logits = v1.convert_to_tensor(logits, name="logits")
        depth = tf.compat.dimension_value(logits.get_shape()[-1]) or tf.shape(logits)[-1]
        return tf.one_hot(tf.argmax(logits, -1), depth, dtype=logits.dtype)


def _nest():
    """``tf.contrib.framework.nest``: TF 1.15's ``tensorflow.python.util.nest``, whose
    ``is_sequence`` TF 2.x renamed ``is_nested``; the other names are TF 2.x's."""
    from tensorflow.python.util import nest  # pylint: disable=import-outside-toplevel
    return _ns("tf.contrib.framework.nest", lambda: [tf.nest, nest], is_sequence=tf.nest.is_nested)


def replace_monitors_with_hooks(monitors_or_hooks, estimator):  # pylint: disable=unused-argument
    """``tf.contrib.learn.monitors.replace_monitors_with_hooks``: the list unchanged when it holds
    session-run hooks only; contrib.learn's monitors themselves are not mapped (an error names
    any that is not a hook)."""
    hooks = list(monitors_or_hooks or [])
    for hook in hooks:
        if not isinstance(hook, tf.compat.v1.train.SessionRunHook):
            raise TypeError("tf.contrib.learn.monitors.replace_monitors_with_hooks: %r is not a "
                            "SessionRunHook; contrib.learn's monitors are not mapped to "
                            "TensorFlow 2 by the TF1 mode of npu_loss_scale.emulate" % (hook,))
    return hooks


_TPU_ESTIMATOR_NAMES = ("RunConfig", "TPUConfig", "TPUEstimator", "TPUEstimatorSpec",
                        "InputPipelineConfig")


class _Tpu(_Namespace):
    """``tf.contrib.tpu``: the TPU estimator (``tf.compat.v1.estimator.tpu``) and ``tf.compat.v1.
    tpu``'s functions, as TF 1.15's contrib.tpu re-exported both."""

    def __getattr__(self, name):
        if name in _TPU_ESTIMATOR_NAMES:
            try:
                return getattr(tf.compat.v1.estimator.tpu, name)
            except (ImportError, AttributeError) as err:
                raise AttributeError(
                    "tf.contrib.tpu.%s is TensorFlow's TPU Estimator, which this TensorFlow does "
                    "not have (it was removed after TF 2.15; install tensorflow-estimator with "
                    "TF 2.15): %s" % (name, err)) from None
        return super().__getattr__(name)


def _tpu():
    out = _Tpu()
    object.__setattr__(out, "_path", "tf.contrib.tpu")
    object.__setattr__(out, "_fallback", lambda: [tf.compat.v1.tpu])
    return out


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
    "map_and_batch", "parallel_interleave", "xavier_initializer",
    "variance_scaling_initializer", "l2_regularizer", "percentile", "transform",
    "translations_to_projective_transforms", "angles_to_projective_transforms", "translate",
    "rotate", "layer_norm", "HParams", "resolve_module", "with_same_shape", "Decoder",
    "tile_batch", "hardmax", "replace_monitors_with_hooks", "contrib",
]
