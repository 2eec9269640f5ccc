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


def boolean(name, value):
    if not isinstance(value, bool):
        raise TypeError("%s must be True or False; got %s" % (name, _describe(value)))
    return value


def one_of(name, value, accepted):
    if value not in accepted:
        raise ValueError("%s must be one of %s; got %r" % (
            name, ", ".join(repr(a) for a in accepted), value))
    return value


def _range_text(minimum, min_inclusive, maximum, max_inclusive):
    parts = []
    if minimum is not None:
        parts.append("%s %r" % (">=" if min_inclusive else ">", minimum))
    if maximum is not None:
        parts.append("%s %r" % ("<=" if max_inclusive else "<", maximum))
    return " and ".join(parts) if parts else "(any finite value)"


FLOAT32_MAX = _FLOAT32_MAX
