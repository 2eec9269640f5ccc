"""Argument validation shared by the public constructors.

Every error names the argument, shows the value received and says what is accepted.
"""
import math
import numbers

_FLOAT32_MAX = 3.4028234663852886e38


def _describe(value):
    return "%r (type %s)" % (value, type(value).__name__)


def real_number(name, value, *, minimum=None, min_inclusive=True, maximum=None,
                max_inclusive=True, accepted=None):
    """Returns ``value`` as a Python float after checking it is a finite real in range."""
    accepted = accepted or _range_text(minimum, min_inclusive, maximum, max_inclusive)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a real number %s; got %s" % (name, accepted, _describe(value)))
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError("%s must be a finite real number %s; got %r" % (name, accepted, value))
    too_low = minimum is not None and (value < minimum if min_inclusive else value <= minimum)
    too_high = maximum is not None and (value > maximum if max_inclusive else value >= maximum)
    if too_low or too_high:
        raise ValueError("%s must be %s; got %r" % (name, accepted, value))
    return value


def positive_int(name, value):
    """Returns ``value`` as an int after checking it is an integer >= 1 (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and not isinstance(value, bool) \
                and float(value).is_integer() and value >= 1:
            return int(value)
        raise TypeError("%s must be an integer >= 1; got %s" % (name, _describe(value)))
    if value < 1:
        raise ValueError("%s must be an integer >= 1; got %r" % (name, value))
    return int(value)


def non_negative_int(name, value):
    """``value`` as an int after checking it is an integer >= 0 (bools refused; an integral
    float such as 3.0 is accepted, as :func:`positive_int` does)."""
    accepted = "an integer >= 0"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be %s; got %r (type %s)"
                        % (name, accepted, value, type(value).__name__))
    if not isinstance(value, numbers.Integral) and not float(value).is_integer():
        raise ValueError("%s must be %s; got %r" % (name, accepted, value))
    if value < 0:
        raise ValueError("%s must be %s; got %r" % (name, accepted, value))
    return int(value)


def boolean(name, value):
    if not isinstance(value, bool):
        raise TypeError("%s must be True or False; got %s" % (name, _describe(value)))
    return value


def one_of(name, value, accepted):
    if value not in accepted:
        raise ValueError("%s must be one of %s; got %r" % (
            name, ", ".join(repr(a) for a in accepted), value))
    return value


def callable_or_none(name, value, accepted):
    """Returns ``value`` after checking it is callable or None."""
    if value is not None and not callable(value):
        raise TypeError("%s must be %s, or None; got %s" % (name, accepted, _describe(value)))
    return value


_FLOAT_NAMES = "float16, bfloat16, float32 or float64"


def _dtype_of(value):
    dtype = getattr(value, "dtype", None)
    return getattr(dtype, "base_dtype", None)


def loss_tensor(loss):
    """Checks the ``loss`` given to an optimizer's ``compute_gradients`` / ``minimize``: a
    floating-point tensor (a callable is left to the caller, which evaluates it)."""
    if callable(loss):
        return loss
    dtype = _dtype_of(loss)
    if dtype is None or not hasattr(dtype, "is_floating"):
        raise TypeError("loss must be a floating-point tensor (%s), or a callable returning one; "
                        "got %s" % (_FLOAT_NAMES, _describe(loss)))
    if not dtype.is_floating:
        raise TypeError("loss must be a floating-point tensor (%s); got %r of dtype %s"
                        % (_FLOAT_NAMES, getattr(loss, "name", loss), dtype.name))
    return loss


def variable_list(name, var_list):
    """Checks an explicit ``var_list``: at least one variable, at least one floating-point.

    ``None`` (the trainable variables) passes; entries without a dtype are left to TensorFlow.
    Integer variables beside floating-point ones pass: TensorFlow gives them no gradient
    (``(None, var)``) and ``apply_gradients`` leaves them alone, as TF 1.15 scripts passing
    ``tf.global_variables()`` (the global step among them) rely on.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if var_list is None:
        return None
    if isinstance(var_list, (str, bytes)):
        raise TypeError("%s must be a list of variables, or None (the trainable variables); "
                        "got %s" % (name, _describe(var_list)))
    given = var_list
    var_list = tf.nest.flatten(var_list)    # as TensorFlow's compute_gradients does
    if not var_list:
        raise ValueError("%s must hold at least one variable to optimize, or be None (the "
                         "trainable variables); got %r" % (name, given))
    not_floating = []
    for i, var in enumerate(var_list):
        dtype = _dtype_of(var)
        if dtype is not None and hasattr(dtype, "is_floating") and not dtype.is_floating:
            not_floating.append((i, var, dtype))
    if len(not_floating) == len(var_list):
        i, var, dtype = not_floating[0]
        raise TypeError("%s must hold at least one floating-point variable (%s): gradients "
                        "exist only for them; got none, %s[%d] = %r of dtype %s"
                        % (name, _FLOAT_NAMES, name, i, getattr(var, "name", var),
                           dtype.name))
    return var_list


def finite_flag(name, value):
    """``value`` (a Python bool, or a bool tensor of one element) as a scalar bool tensor."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if isinstance(value, bool):
        return tf.constant(value)
    if value is None:
        raise TypeError("%s must be a Python bool or a scalar bool tensor (True = every gradient "
                        "is finite); got None" % name)
    flag = tf.convert_to_tensor(value)
    if flag.dtype != tf.bool:
        raise TypeError("%s must be a Python bool or a scalar bool tensor (True = every gradient "
                        "is finite); got dtype %s" % (name, flag.dtype.name))
    size = flag.shape.num_elements()
    if size is not None and size != 1:
        raise ValueError("%s must be a scalar bool tensor (or one with a single element); got "
                         "shape %s" % (name, flag.shape))
    if flag.shape.rank != 0:
        flag = tf.reshape(flag, [])
    return flag


def _range_text(minimum, min_inclusive, maximum, max_inclusive):
    parts = []
    if minimum is not None:
        parts.append("%s %r" % (">=" if min_inclusive else ">", minimum))
    if maximum is not None:
        parts.append("%s %r" % ("<=" if max_inclusive else "<", maximum))
    return " and ".join(parts) if parts else "(any finite value)"


FLOAT32_MAX = _FLOAT32_MAX
