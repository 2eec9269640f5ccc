"""TensorFlow's collective ops (``tensorflow.python.ops.collective_ops``) across releases.

``all_reduce_v2`` takes a ``name`` from TF 2.8 on. Before (TF 2.6.5) the op is built inside a
name scope of that name instead, so it is called ``<name>/CollectiveReduceV2``: its errors (a
timed-out or aborted all-reduce) still name it.
"""
import inspect

import tensorflow as tf


def _ops():
    from tensorflow.python.ops import collective_ops  # pylint: disable=import-outside-toplevel
    return collective_ops


def all_reduce_v2(tensor, name=None, **kwargs):
    """``collective_ops.all_reduce_v2(tensor, **kwargs)``, its op named after ``name``."""
    reduce = _ops().all_reduce_v2
    if name is None:
        return reduce(tensor, **kwargs)
    if "name" in inspect.signature(reduce).parameters:
        return reduce(tensor, name=name, **kwargs)
    with tf.name_scope(name):
        return reduce(tensor, **kwargs)
