"""Variables the package creates, and the hashable key of a variable.

* ``Variable(...)``: ``tf.Variable``, always a resource variable. TensorFlow 1.15's
  ``tf.Variable`` makes a reference variable unless asked otherwise; an op that reads a reference
  variable sees whatever value the buffer holds when it runs, so the scale a step used could be
  read after that step's own update. Resource variables order reads and writes as written.
* ``key(var)``: ``var.ref()`` (TensorFlow 2.x), ``var.experimental_ref()`` (1.15), or the
  object's id when it has neither.
"""
import tensorflow as tf

_V1_VARIABLE = tf.Variable is tf.compat.v1.Variable


def Variable(*args, **kwargs):  # pylint: disable=invalid-name
    """``tf.Variable(*args, **kwargs)`` as a resource variable on every TensorFlow."""
    if _V1_VARIABLE:
        return tf.compat.v1.Variable(*args, use_resource=True, **kwargs)
    return tf.Variable(*args, **kwargs)


def key(var):
    """A hashable stand-in for ``var`` (variables themselves are not hashable in 2.x)."""
    ref = getattr(var, "ref", None) or getattr(var, "experimental_ref", None)
    return id(var) if ref is None else ref()
