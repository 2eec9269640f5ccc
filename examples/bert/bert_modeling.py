"""A tf.compat.v1 (graph-mode) BERT encoder with an fp32 or a mixed-fp16 path.

Built for all-MiniLM-L6-v2 (6 layers, hidden 384, 12 heads, FFN 1536, vocab 30522), but any
BERT ``config.json`` works. Variables are always float32 ("master weights").

Mixed fp16 (``precision='fp16'``) places a *float16 op boundary* (:func:`_sat`) where an Ascend
device produces a float16 tensor: each weight as the matmuls read it, every matmul / attention
product / GELU / residual-add output, the softmax probabilities and each layer-norm output.
At a boundary the value is rounded to float16 and saturated as the device does in saturation
mode — an overflow becomes +-65504, NaN becomes 0, and the emulated float-status register
records it — and the gradient flowing back through the boundary is rounded and saturated the
same way (``npu_loss_scale.emulation.round_to_float16``). Embedding
lookups, softmax and layer-norm statistics, pooling, the classifier and the loss stay float32.

Between boundaries the arithmetic runs in float32 (the device's matrix unit also accumulates
float16 products in float32). That is the one liberty taken: TensorFlow's float16 CPU kernels
are 5-100x slower than float32 ones (its float16 GEMM has no vectorised CPU path), so genuine
float16 ops would make this example impractical on a CPU, while the values a float16 tensor can
hold, its precision, and where it overflows are exactly those of float16.

Weights load from the HF ``model.safetensors`` (``BertModel`` tensor names, linear weights
stored (out, in) and transposed here to TF's (in, out)) with ``safetensors.numpy`` — no torch.
"""
import json
import math
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1

SCOPE = "bert"


class BertConfig:
    """The subset of a HF BERT ``config.json`` the encoder uses."""

    def __init__(self, vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                 num_attention_heads=12, intermediate_size=1536, max_position_embeddings=512,
                 type_vocab_size=2, layer_norm_eps=1e-12, hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, initializer_range=0.02, hidden_act="gelu"):
        if hidden_size % num_attention_heads:
            raise ValueError("hidden_size (%d) must be a multiple of num_attention_heads (%d)"
                             % (hidden_size, num_attention_heads))
        if hidden_act != "gelu":
            raise ValueError("only hidden_act='gelu' (the erf form) is implemented; got %r"
                             % (hidden_act,))
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.layer_norm_eps = layer_norm_eps
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.hidden_act = hidden_act

    @classmethod
    def from_json_file(cls, path):
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
        names = cls.__init__.__code__.co_varnames[1:cls.__init__.__code__.co_argcount]
        return cls(**{k: raw[k] for k in names if k in raw})


# -- float16 op boundaries and saturation: the one switch -----------------------------------------
_saturation = {"enabled": True}


def set_saturation(enabled):
    """Turns the saturation emulation at float16 op boundaries on (default) or off. Off — or
    with ``npu_loss_scale.set_device_sat_mode(1)`` (INF/NaN mode) — an overflow gives IEEE
    inf/NaN, as on a GPU or an Ascend device in INF/NaN mode. Read when the graph is built."""
    _saturation["enabled"] = bool(enabled)


def _sat(x):
    """A float16 op boundary: the float32 result ``x`` of an op becomes the float16 output the
    device would produce — rounded to float16 precision and saturated (+-65504, NaN -> 0,
    overflow recorded in the emulated float-status register) — and the gradient flowing back
    into it is rounded and saturated the same way (``npu_loss_scale.emulation.round_to_float16``:
    one pass over the tensor). Returned as float32 holding float16 values, so the next op
    computes in float32 (the device's matrix unit also accumulates float16 products in float32);
    TensorFlow's float16 CPU kernels are 5-100x slower than this emulation and would make the
    example impractical. With saturation off, only rounded (IEEE inf and NaN kept)."""
    from npu_loss_scale import emulation
    if _saturation["enabled"]:
        return emulation.round_to_float16(x)
    return tf.cast(tf.cast(x, tf.float16), tf.float32)


class Precision:
    """Where the model rounds to float16: nowhere (``fp32``) or at every op boundary (``fp16``)."""

    def __init__(self, name):
        if name not in ("fp32", "fp16"):
            raise ValueError("precision must be 'fp32' or 'fp16'; got %r" % (name,))
        self.name = name
        self.half = name == "fp16"

    def out(self, x):
        """An op's output: a float16 boundary in fp16, unchanged in fp32."""
        return _sat(x) if self.half else x


# -- building blocks -----------------------------------------------------------------------------
def _initializer(config):
    return tf1.truncated_normal_initializer(stddev=config.initializer_range)


def dense(x, units, name, config, precision):
    """``x @ kernel + bias`` on the last axis. In fp16 the float32 master weights are rounded
    to float16 (so their gradients are too), the product accumulates in float32 and the result
    is a float16 boundary."""
    in_dim = int(x.shape[-1])
    with tf1.variable_scope(name):
        kernel = tf1.get_variable("kernel", [in_dim, units], tf.float32, _initializer(config))
        bias = tf1.get_variable("bias", [units], tf.float32, tf1.zeros_initializer())
    kernel, bias = precision.out(kernel), precision.out(bias)
    y = tf.nn.bias_add(tf.matmul(tf.reshape(x, [-1, in_dim]), kernel), bias)
    y = precision.out(y)
    if x.shape.ndims == 2:
        return y
    return tf.reshape(y, tf.concat([tf.shape(x)[:-1], [units]], axis=0))


def layer_norm(x, name, config, precision):
    """Layer normalisation in float32; the output is a float16 boundary in fp16."""
    with tf1.variable_scope(name):
        gamma = tf1.get_variable("gamma", [x.shape[-1]], tf.float32, tf1.ones_initializer())
        beta = tf1.get_variable("beta", [x.shape[-1]], tf.float32, tf1.zeros_initializer())
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    y = (x - mean) * tf.math.rsqrt(var + config.layer_norm_eps) * gamma + beta
    return precision.out(y)


def gelu(x, precision):
    """The exact (erf) GELU."""
    return precision.out(0.5 * x * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0)))))


def dropout(x, rate, training):
    if not training or rate <= 0:
        return x
    return tf.nn.dropout(x, rate=rate)


def attention(x, additive_mask, config, precision, training):
    """Multi-head self-attention on ``x`` [batch, seq, hidden]; ``additive_mask`` is
    [batch, 1, 1, seq] (0 for tokens, -10000 for padding). Softmax runs in float32."""
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    batch, seq = tf.shape(x)[0], tf.shape(x)[1]

    def split_heads(t):
        t = tf.reshape(t, [batch, seq, heads, head_dim])
        return tf.transpose(t, [0, 2, 1, 3])  # [batch, heads, seq, head_dim]

    with tf1.variable_scope("self"):
        q = split_heads(dense(x, config.hidden_size, "query", config, precision))
        k = split_heads(dense(x, config.hidden_size, "key", config, precision))
        v = split_heads(dense(x, config.hidden_size, "value", config, precision))
    q = precision.out(q * (1.0 / math.sqrt(head_dim)))
    scores = precision.out(tf.matmul(q, k, transpose_b=True))  # [batch, heads, seq, seq]
    probs = precision.out(tf.nn.softmax(scores + additive_mask, axis=-1))
    probs = dropout(probs, config.attention_probs_dropout_prob, training)
    context = precision.out(tf.matmul(probs, v))                # [batch, heads, seq, head_dim]
    context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [batch, seq, config.hidden_size])
    with tf1.variable_scope("output"):
        out = dense(context, config.hidden_size, "dense", config, precision)
        out = dropout(out, config.hidden_dropout_prob, training)
        return layer_norm(precision.out(out + x), "LayerNorm", config, precision)


def transformer_layer(x, additive_mask, config, precision, training):
    with tf1.variable_scope("attention"):
        attended = attention(x, additive_mask, config, precision, training)
    with tf1.variable_scope("intermediate"):
        inner = gelu(dense(attended, config.intermediate_size, "dense", config, precision),
                     precision)
    with tf1.variable_scope("output"):
        out = dense(inner, config.hidden_size, "dense", config, precision)
        out = dropout(out, config.hidden_dropout_prob, training)
        return layer_norm(precision.out(out + attended), "LayerNorm", config, precision)


def embeddings(input_ids, segment_ids, config, precision, training):
    """Word + position + token-type embeddings (float32 lookups), layer norm in float32."""
    seq = tf.shape(input_ids)[1]
    init = _initializer(config)
    with tf1.variable_scope("embeddings"):
        words = tf1.get_variable("word_embeddings", [config.vocab_size, config.hidden_size],
                                 tf.float32, init)
        positions = tf1.get_variable("position_embeddings",
                                     [config.max_position_embeddings, config.hidden_size],
                                     tf.float32, init)
        types = tf1.get_variable("token_type_embeddings",
                                 [config.type_vocab_size, config.hidden_size], tf.float32, init)
        summed = (tf.gather(words, input_ids) + tf.gather(types, segment_ids)
                  + tf.expand_dims(positions[:seq], 0))
        out = layer_norm(summed, "LayerNorm", config, precision)
        return dropout(out, config.hidden_dropout_prob, training)


def encoder(input_ids, input_mask, segment_ids, config, precision="fp32", training=False):
    """The BERT encoder: returns the last layer's sequence output [batch, seq, hidden] (float32;
    in fp16 its values are float16 values). Creates its variables under ``bert/`` (reused if
    present). ``precision``: ``'fp32'`` or ``'fp16'`` (mixed: float32 master weights,
    embeddings, softmax, layer-norm statistics and loss; float16 at every op boundary)."""
    if not isinstance(precision, Precision):
        precision = Precision(precision)
    with tf1.variable_scope(SCOPE, reuse=tf1.AUTO_REUSE):
        x = embeddings(input_ids, segment_ids, config, precision, training)
        mask = tf.cast(input_mask, tf.float32)
        additive_mask = (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * -10000.0
        with tf1.variable_scope("encoder"):
            for i in range(config.num_hidden_layers):
                with tf1.variable_scope("layer_%d" % i):
                    x = transformer_layer(x, additive_mask, config, precision, training)
    return x


def mean_pool(sequence_output, input_mask):
    """Mean of the token vectors over the non-padding positions (float32)."""
    mask = tf.cast(input_mask, tf.float32)[:, :, tf.newaxis]
    total = tf.reduce_sum(sequence_output * mask, axis=1)
    return total / tf.maximum(tf.reduce_sum(mask, axis=1), 1e-9)


def classifier_logits(pooled, num_labels, config, training, dropout_rate=0.1):
    """A float32 linear classifier on the pooled vector, under ``classifier/``."""
    with tf1.variable_scope("classifier", reuse=tf1.AUTO_REUSE):
        pooled = dropout(pooled, dropout_rate, training)
        return dense(pooled, num_labels, "dense", config, Precision("fp32"))


# -- pretrained weights --------------------------------------------------------------------------
def _hf_name(tf_name):
    """TF variable name (without ``:0``) under ``bert/`` -> HF BertModel tensor name, plus
    whether the array must be transposed."""
    parts = tf_name.split("/")
    if parts[0] != SCOPE:
        raise KeyError(tf_name)
    parts = parts[1:]
    leaf = parts[-1]
    transpose = leaf == "kernel"
    renamed = {"kernel": "weight", "gamma": "weight", "beta": "bias", "bias": "bias"}
    out = []
    for p in parts[:-1]:
        if p.startswith("layer_") and p[6:].isdigit():
            out.extend(["layer", p[6:]])
        else:
            out.append(p)
    if leaf in renamed:
        out.append(renamed[leaf])
    else:  # embedding tables
        out.extend([leaf, "weight"])
    return ".".join(out), transpose


def load_pretrained_arrays(model_dir):
    """Reads ``model.safetensors`` into ``{hf_name: np.ndarray}`` (float32)."""
    from safetensors.numpy import load_file
    tensors = load_file(os.path.join(str(model_dir), "model.safetensors"))
    return {k: v for k, v in tensors.items() if v.dtype.kind == "f"}


def pretrained_values(variables, hf_arrays):
    """Maps each ``bert/`` variable to its pretrained array (transposed for kernels).

    Raises ValueError when a variable has no tensor or a shape disagrees. Returns
    ``(values, unused)``: values as ``[(variable, array)]``, unused as the HF names not used.
    """
    values, used, problems = [], set(), []
    for var in variables:
        name = var.op.name
        if not name.startswith(SCOPE + "/"):
            continue
        hf, transpose = _hf_name(name)
        if hf not in hf_arrays:
            problems.append("%s: no tensor %r in the checkpoint" % (name, hf))
            continue
        array = hf_arrays[hf].T if transpose else hf_arrays[hf]
        if tuple(array.shape) != tuple(var.shape.as_list()):
            problems.append("%s: shape %s, checkpoint %r has %s"
                            % (name, var.shape.as_list(), hf, list(array.shape)))
            continue
        values.append((var, np.ascontiguousarray(array, dtype=np.float32)))
        used.add(hf)
    if problems:
        raise ValueError("pretrained weights do not fit the model:\n  " + "\n  ".join(problems))
    return values, sorted(set(hf_arrays) - used)


class PretrainedLoader:
    """Builds assign ops (fed from placeholders, so the 90 MB of weights stay out of the
    GraphDef) for every trainable ``bert/`` variable (optimizer slots are left alone); call :meth:`load` with a session, or pass
    :meth:`init_fn` as a ``Scaffold(init_fn=...)``. Create it before the graph is finalized."""

    def __init__(self, model_dir, variables=None):
        if variables is None:
            variables = tf1.trainable_variables(SCOPE + "/")
        self.values, self.unused = pretrained_values(variables,
                                                     load_pretrained_arrays(model_dir))
        self._feeds = []
        with tf.name_scope("load_pretrained"):
            for var, array in self.values:
                ph = tf1.placeholder(tf.float32, array.shape)
                self._feeds.append((ph, array, var.assign(ph, read_value=False)))
        self.op = tf.group(*[a for _, _, a in self._feeds]) if self._feeds else tf.no_op()

    def load(self, session):
        session.run(self.op, feed_dict={ph: array for ph, array, _ in self._feeds})

    def init_fn(self, scaffold, session):  # pylint: disable=unused-argument
        self.load(session)
