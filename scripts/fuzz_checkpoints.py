"""The fuzz campaign's tampered checkpoints: a checkpoint with one loss-scale value replaced by an
impossible one (scripts/fuzz_campaign.py)."""
import numpy as np
import tensorflow as tf

# ---------------------------------------------------------------------------------------------
# Tampered checkpoints
# ---------------------------------------------------------------------------------------------
_SCALE_NAMES = ("loss_scale", "scale", "current_loss_scale", "dynamic_scale")
_COUNTER_NAMES = ("good_steps", "bad_steps", "growth_tracker", "counter", "step_counter")


def scale_state_keys(prefix):
    """The checkpoint's keys of loss-scale state, by the variable's own name (the last part of
    the key): ([scale keys], [counter keys])."""
    keys = sorted(tf.train.load_checkpoint(prefix).get_variable_to_dtype_map())
    return ([k for k in keys if short_name(k) in _SCALE_NAMES],
            [k for k in keys if short_name(k) in _COUNTER_NAMES])


def _tampered_value(value, kind, rule):
    value = np.asarray(value)
    if kind == "wrong_shape":
        return np.stack([value, value])
    if kind == "negative":
        return np.asarray(-3 if value.dtype.kind == "i" else -2.0, value.dtype)
    floats = {"nan": np.nan, "inf": np.inf, "zero": 0.0,
              "below_min": float(rule.get("min_scale", 1.0)) / 2.0}
    return np.asarray(floats[kind], value.dtype)


def tamper_checkpoint(prefix, out_prefix, tamper, rule):
    """Writes ``out_prefix``: the checkpoint ``prefix`` with one loss-scale value replaced by an
    impossible one (``tamper["kind"]``). Returns the key changed, or None when the checkpoint
    holds no value that kind applies to."""
    scales, counters = scale_state_keys(prefix)
    kind = tamper["kind"]
    candidates = counters + scales if kind in ("negative", "wrong_shape") else scales
    if not candidates:
        return None
    key = candidates[tamper["which"] % len(candidates)]
    reader = tf.train.load_checkpoint(prefix)
    dtypes = reader.get_variable_to_dtype_map()
    names = sorted(dtypes)
    values = [_tampered_value(reader.get_tensor(name), kind, rule) if name == key
              else reader.get_tensor(name) for name in names]

    def save():
        return tf.raw_ops.SaveV2(prefix=out_prefix, tensor_names=names,
                                 shape_and_slices=[""] * len(names),
                                 tensors=[tf.constant(value, dtype=dtypes[name])
                                          for name, value in zip(names, values)])
    if tf.executing_eagerly():
        save()
    else:   # TF 1.15's graph mode: the op runs in a Session of its own graph
        with tf.Graph().as_default():
            op = save()
            with tf.compat.v1.Session() as sess:
                sess.run(op)
    return key


def short_name(key):
    """``opt/loss_scale/.ATTRIBUTES/VARIABLE_VALUE`` -> ``loss_scale``."""
    name = key.split("/.", 1)[0]
    return name.rsplit("/", 1)[-1].lstrip("_")
