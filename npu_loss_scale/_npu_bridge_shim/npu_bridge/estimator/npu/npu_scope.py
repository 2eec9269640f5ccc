"""Shim of ``npu_bridge.estimator.npu.npu_scope``: compilation/placement scopes.

On the device these scopes steer the graph compiler (keep an op's dtype, leave ops uncompiled,
place variables on the host, pipeline stages). A CPU has no such compiler: each scope records
its attribute on the ops built inside it (as the adapter does, ``_keep_dtype`` and so on) and
changes nothing else.
"""
import contextlib

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from npu_bridge._shim import module_getattr as _module_getattr
from npu_loss_scale.device import precision_lists


@contextlib.contextmanager
def _attr_scope(**attrs):
    graph = tf.compat.v1.get_default_graph()
    values = {k: attr_value_pb2.AttrValue(**v) for k, v in attrs.items()}
    with graph._attr_scope(values):  # pylint: disable=protected-access
        yield


def without_npu_compile_scope():
    """Ops built inside stay out of device compilation: on CPU, nothing to leave out."""
    return _attr_scope(_without_npu_compile={"b": True})


@contextlib.contextmanager
def keep_dtype_scope():
    """Ops built inside keep their dtype under ``precision_mode``: recorded as ``_keep_dtype``,
    which the CPU precision emulation honours, as it does for the ops run eagerly inside
    (:mod:`npu_loss_scale.device.precision_lists`)."""
    with _attr_scope(_keep_dtype={"i": 1}), precision_lists.keeping_dtype():
        yield


def npu_variable_scope(placement=None):
    """Variables built inside are placed as ``placement`` says: on CPU, where they are."""
    value = getattr(placement, "value", placement) or "all"
    return _attr_scope(_variable_placement={"s": str(value).encode()})


def npu_stage_scope(stage):
    """Pipeline stage ``stage`` of the ops built inside (recorded only)."""
    return _attr_scope(_stage_level={"i": int(stage)})


def npu_mem_type_scope():
    return _attr_scope(_output_memory_type={"i": 1})


__all__ = ["without_npu_compile_scope", "keep_dtype_scope", "npu_variable_scope",
           "npu_stage_scope", "npu_mem_type_scope"]
__getattr__ = _module_getattr(__name__, __all__)
