"""``tf.contrib.layers``: the initializers and regularizer Ascend scripts use, ``layer_norm`` with TF
1.15's variable names, and the ``tf_slim`` package for the rest (and for ``tf.contrib.slim``)."""
import importlib

import tensorflow as tf


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


__all__ = ["xavier_initializer", "variance_scaling_initializer", "l2_regularizer", "layer_norm"]
