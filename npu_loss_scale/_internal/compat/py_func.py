"""``tf.numpy_function`` with ``stateful=``, on every release.

TensorFlow 1.15's and 2.6's ``tf.numpy_function`` take no ``stateful`` argument: their op is
always stateful (never pruned, deduplicated or constant-folded), which is what the package's callbacks
(step reports, overflow-site records) need. Later releases take ``stateful`` (default True).
"""
import inspect

import tensorflow as tf


def numpy_function(func, inp, Tout, stateful=True, name=None):  # pylint: disable=invalid-name
    """``tf.numpy_function(func, inp, Tout, stateful=stateful, name=name)``; where TensorFlow
    has no ``stateful`` the op is stateful whatever was asked."""
    if "stateful" in inspect.signature(tf.numpy_function).parameters:
        return tf.numpy_function(func, inp, Tout, stateful=stateful, name=name)
    return tf.numpy_function(func, inp, Tout, name=name)
