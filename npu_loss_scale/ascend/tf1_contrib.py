"""``tf.contrib`` for user code in TF1 mode: the pieces Ascend loss-scale scripts use most.

Measured on the loss-scale model directories of ModelZoo-TensorFlow (directories using each):
``data.map_and_batch`` 26, ``layers.xavier_initializer`` 26, ``data.parallel_interleave`` 24,
``data.AUTOTUNE`` 24, ``layers.layer_norm`` 20, ``slim`` 19, ``layers.variance_scaling_initializer``
12, ``layers.l2_regularizer`` 8 (``tpu.*`` 15-20 too: TPU estimators, not mapped). Each mapped
name is TF 2.x's equivalent with TF 1.15's arguments; ``slim`` is the maintained ``tf_slim``
package when it is installed. Any other name raises an AttributeError that names it.
"""
import types

import tensorflow as tf


class _Namespace(types.SimpleNamespace):
    _path = "tf.contrib"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError("%s.%s is not mapped to TensorFlow 2 by the TF1 mode of "
                             "npu_loss_scale.emulate" % (object.__getattribute__(self, "_path"),
                                                         name))


def _ns(path, **names):
    ns = _Namespace(**names)
    object.__setattr__(ns, "_path", path)
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
    out = _Contrib(
        data=_ns("tf.contrib.data", map_and_batch=map_and_batch,
                 parallel_interleave=parallel_interleave, AUTOTUNE=tf.data.experimental.AUTOTUNE),
        layers=_ns("tf.contrib.layers", xavier_initializer=xavier_initializer,
                   variance_scaling_initializer=variance_scaling_initializer,
                   l2_regularizer=l2_regularizer, layer_norm=layer_norm))
    object.__setattr__(out, "_path", "tf.contrib")
    return out
