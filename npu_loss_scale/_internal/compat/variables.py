"""Variables the package creates, and the hashable key of a variable.

* ``Variable(...)``: ``tf.Variable``, always a resource variable. TensorFlow 1.15's
  ``tf.Variable`` makes a reference variable unless asked otherwise; an op that reads a reference
  variable sees whatever value the buffer holds when it runs, so the scale a step used could be
  read after that step's own update. Resource variables order reads and writes as written.
* ``snapshot(value)``: the value of a variable or tensor now, a tensor that later writes leave
  alone. TensorFlow 1.15's ``global_step`` is a reference variable, and ``tf.identity`` of it
  shares its buffer (so does its ``<name>/read`` value): an ``AssignAdd`` that runs afterwards
  shows through. A reference is copied with the ``Snapshot`` op; anything else goes through ``tf.identity`` as before.
* ``key(var)``: ``var.ref()`` (TensorFlow 2.x), ``var.experimental_ref()`` (1.15), or the
  object's id when it has neither; a component of a ``tf.distribute`` variable is keyed as the
  variable it belongs to. (TensorFlow 1.15's ``call_for_each_replica`` hands each replica the
  component of a ``MirroredVariable`` that lives on its device; 2.x hands it the variable
  itself. Either way the same variable gets the same key.)
"""
import tensorflow as tf
from tensorflow.python.ops import gen_array_ops, resource_variable_ops
from tensorflow.python.util import deprecation

_V1_VARIABLE = tf.Variable is tf.compat.v1.Variable


def Variable(*args, **kwargs):  # pylint: disable=invalid-name
    """``tf.Variable(*args, **kwargs)`` as a resource variable on every TensorFlow."""
    if _V1_VARIABLE:
        # 1.15's ResourceVariable passes its own deprecated ``constraint`` argument on to its
        # base class, whose decorator then logs "calling BaseResourceVariable.__init__ with
        # constraint is deprecated" for a call neither the package nor the user made; TensorFlow
        # mutes its own internal calls this way (deprecation.silence), and so does this one.
        with deprecation.silence():
            return tf.compat.v1.Variable(*args, use_resource=True, **kwargs)
    return tf.Variable(*args, **kwargs)


def key(var):
    """A hashable stand-in for ``var`` (variables themselves are not hashable in 2.x)."""
    container = getattr(var, "_distributed_container", None)
    if container is not None:   # a weak reference to the tf.distribute variable
        var = container() or var
    ref = getattr(var, "ref", None) or getattr(var, "experimental_ref", None)
    return id(var) if ref is None else ref()


def snapshot(value):
    """``value`` (a variable or tensor) as it is when the returned tensor runs."""
    tensor = tf.convert_to_tensor(value)
    reference = tensor.dtype._is_ref_dtype or (  # pylint: disable=protected-access
        isinstance(value, tf.Variable) and not resource_variable_ops.is_resource_variable(value))
    if reference:   # its value tensor ("<name>/read") shares the variable's buffer
        return gen_array_ops.snapshot(tensor)
    return tf.identity(tensor)
