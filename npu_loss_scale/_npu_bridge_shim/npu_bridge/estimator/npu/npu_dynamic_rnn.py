"""Shim of ``npu_bridge.estimator.npu.npu_dynamic_rnn``: the device's fused LSTM, ``DynamicRNN``.

``DynamicRNN(hidden_size, dtype, ..., forget_bias=0.0)`` called on a time-major input
``x`` of shape [T, B, I] returns ``(y, output_h, output_c, i, j, f, o, tanhc)``, each [T, B, H]:
the LSTM of the device's DynamicRNN op, computed step by step with TensorFlow ops (so its gradient
is TensorFlow's):

    [i, j, f, o] = [x_t, h_{t-1}] @ w + b          (w: [I + H, 4H], b: [4H], gates in that order)
    i = sigmoid(i); j = tanh(j); f = sigmoid(f + forget_bias); o = sigmoid(o)
    c_t = f * c_{t-1} + i * j;  tanhc = tanh(c_t);  h_t = o * tanhc;  y_t = h_t

Variables ``dynamicrnn/w`` (Glorot uniform) and ``dynamicrnn/b`` (zeros) are created on the first
call in a fresh variable scope. With ``seq_length`` ([B] int), steps at or beyond a sequence's
length output zeros and carry the state unchanged. The options the device does not support
either (peephole, dropout, cell clip, projection, batch-major input, other cells, directions,
depths or activations) raise a ValueError naming the option, as they cannot run on the device.
``DynamicGRUV2`` and ``DynamicAUGRU`` are not emulated.
"""
import tensorflow as tf

from npu_bridge._shim import module_getattr as _module_getattr

DYNAMIC_RNN_UNIDIRECTION = "UNIDIRECTIONAL"
DYNAMIC_RNN_BIDIRECTION = "BIDIRECTIONAL"


class DynamicRNN:
    """The device's fused single-layer LSTM over a time-major sequence (see the module)."""

    def __init__(self, hidden_size, dtype, cell_type="LSTM", direction=DYNAMIC_RNN_UNIDIRECTION,
                 cell_depth=1, use_peephole=False, keep_prob=1.0, cell_clip=-1.0, num_proj=0,
                 time_major=True, activation="tanh", forget_bias=0.0, is_training=True):
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 1:
            raise ValueError("hidden_size must be an int >= 1; got %r" % (hidden_size,))
        unsupported = [(name, value, accepted) for name, value, ok, accepted in (
            ("cell_type", cell_type, cell_type == "LSTM", "'LSTM'"),
            ("direction", direction, direction == DYNAMIC_RNN_UNIDIRECTION,
             repr(DYNAMIC_RNN_UNIDIRECTION)),
            ("cell_depth", cell_depth, cell_depth == 1, "1"),
            ("use_peephole", use_peephole, use_peephole is False, "False"),
            ("keep_prob", keep_prob, keep_prob == 1.0, "1.0"),
            ("cell_clip", cell_clip, cell_clip == -1.0, "-1.0"),
            ("num_proj", num_proj, num_proj in (0, None), "0"),
            ("time_major", time_major, time_major is True, "True"),
            ("activation", activation, activation == "tanh", "'tanh'")) if not ok]
        if unsupported:
            name, value, accepted = unsupported[0]
            raise ValueError("DynamicRNN %s must be %s (the device's DynamicRNN supports nothing "
                             "else); got %r" % (name, accepted, value))
        self._hidden = hidden_size
        self._dtype = tf.as_dtype(dtype)
        self._forget_bias = float(forget_bias)
        self.is_training = is_training
        self._w = None
        self._b = None

    def _build(self, input_size):
        with tf.compat.v1.variable_scope(None, default_name="dynamic_rnn"):
            self._w = tf.compat.v1.get_variable(
                "dynamicrnn/w", [input_size + self._hidden, 4 * self._hidden], self._dtype,
                initializer=tf.compat.v1.glorot_uniform_initializer(seed=10))
            self._b = tf.compat.v1.get_variable(
                "dynamicrnn/b", [4 * self._hidden], self._dtype,
                initializer=tf.compat.v1.zeros_initializer())

    def __call__(self, x, w=None, b=None, seq_length=None, init_h=None, init_c=None):
        x = tf.convert_to_tensor(x)
        x = tf.cast(x, self._dtype) if x.dtype != self._dtype else x
        if x.shape.rank != 3:
            raise ValueError("DynamicRNN input must be [num_step, batch_size, input_size]; got "
                             "shape %s" % x.shape)
        if self._w is None and (w is None or b is None):
            self._build(int(x.shape[2]))
        w = self._w if w is None else w
        b = self._b if b is None else b
        batch = tf.shape(x)[1]
        zeros = tf.zeros(tf.stack([batch, self._hidden]), self._dtype)
        h0 = zeros if init_h is None else tf.reshape(init_h, tf.shape(zeros))
        c0 = zeros if init_c is None else tf.reshape(init_c, tf.shape(zeros))
        steps = tf.range(tf.shape(x)[0])
        forget_bias = tf.cast(self._forget_bias, self._dtype)

        def step(carry, elems):
            h, c = carry[0], carry[1]
            x_t, t = elems
            gates = tf.matmul(tf.concat([x_t, h], 1), w) + b
            i, j, f, o = tf.split(gates, 4, axis=1)
            i, j, f, o = tf.sigmoid(i), tf.tanh(j), tf.sigmoid(f + forget_bias), tf.sigmoid(o)
            c_new = f * c + i * j
            tanhc = tf.tanh(c_new)
            h_new = o * tanhc
            y = h_new
            if seq_length is not None:
                alive = tf.expand_dims(tf.cast(t < tf.cast(seq_length, tf.int32), self._dtype), 1)
                h_new = alive * h_new + (1 - alive) * h
                c_new = alive * c_new + (1 - alive) * c
                y = alive * y
            return (h_new, c_new, y, i, j, f, o, tanhc)

        init = (h0, c0) + (zeros,) * 6
        out = tf.scan(step, (x, steps), initializer=init)
        h_all, c_all, y, i, j, f, o, tanhc = out
        return y, h_all, c_all, i, j, f, o, tanhc


__all__ = ["DynamicRNN", "DYNAMIC_RNN_UNIDIRECTION", "DYNAMIC_RNN_BIDIRECTION"]
__getattr__ = _module_getattr(__name__, __all__)
