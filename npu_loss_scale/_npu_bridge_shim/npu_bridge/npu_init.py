"""Shim of ``npu_bridge.npu_init``: what ``from npu_bridge.npu_init import *`` gives on CPU.

The names the adapter's ``npu_init`` exports, each either working on CPU (see the module of each
name) or raising an error that says it is not emulated:

* loss scaling: ``NPULossScaleOptimizer``, ``FixedLossScaleManager``,
  ``ExponentialUpdateLossScaleManager`` (:mod:`npu_loss_scale`);
* Estimator: ``NPURunConfig``, ``NPUEstimator``, ``NPUEstimatorSpec``, ``DumpConfig``,
  ``ProfilingConfig``, ``DynamicInputConfig``, the hooks; Keras's
  ``NPUBroadcastGlobalVariablesCallback``;
* distribution (the identity at one rank; across the processes of ``emulate --ranks N``):
  ``NPUDistributedOptimizer``, ``NPUOptimizer``, ``npu_distributed_optimizer_wrapper``,
  ``KerasDistributeOptimizer``, ``npu_keras_optimizer``, ``npu_tf_optimizer``,
  ``npu_callbacks_append``, ``npu_allreduce``, ``hccl_ops``, rank helpers,
  ``set_split_strategy_by_idx/_by_size``;
* modules: ``npu_ops``, ``npu_scope``, ``util``, ``npu_unary_ops``, ``hccl_ops``;
* session helpers: ``npu_config_proto``, ``npu_session_config_init``, ``npu_run_config_init``,
  ``npu_graph_options``, ``npu_optimizer_options``, ``npu_hooks_append``,
  ``set_keras_session_npu_config``, ``init_resource``/``shutdown_resource``, ``close_session``,
  ``npu_keras_optimizer``, ``npu_tf_optimizer``, ``npu_clear_session``;
* TensorFlow's ``config_pb2``, ``rewriter_config_pb2``, ``RewriterConfig``, ``session``,
  ``session_run_hook`` and ``os``.

**``tf``**: the adapter's npu_init also hands out ``tf`` (TF 1.15 on the device). On TF 2.x the
importing script's own ``tf`` is kept: a star import after ``import tensorflow.compat.v1 as tf``
leaves that ``tf`` in place, and a script with no ``tf`` of its own gets ``tensorflow``.
"""
import os  # noqa: F401  (exported, as by the adapter)
import sys as _sys

import tensorflow as _tf
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2  # noqa: F401
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig
from tensorflow.python.client import session  # noqa: F401
from tensorflow.python.training import session_run_hook  # noqa: F401

from npu_loss_scale.device import precision as _precision
from npu_bridge._ranks import (get_local_rank_id, get_local_rank_size, get_rank_id,  # noqa: F401
                               get_rank_size)
from npu_bridge._shim import module_getattr as _module_getattr
from npu_bridge.estimator import npu_ops  # noqa: F401
from npu_bridge.estimator.npu import npu_plugin, npu_scope, util  # noqa: F401
from npu_bridge.estimator.npu.npu_config import (DumpConfig, DynamicInputConfig,  # noqa: F401
                                                 NPURunConfig, ProfilingConfig)
from npu_bridge.estimator.npu.npu_estimator import NPUEstimator, NPUEstimatorSpec  # noqa: F401
from npu_bridge.estimator.npu.npu_hook import (NPUBroadcastGlobalVariablesHook,  # noqa: F401
                                               NPUCheckpointSaverHook, NPUOutputTensorHook)
from npu_bridge.estimator.npu.npu_loss_scale_manager import (  # noqa: F401
    ExponentialUpdateLossScaleManager, FixedLossScaleManager)
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer  # noqa: F401
from npu_bridge.estimator.npu.npu_optimizer import (KerasDistributeOptimizer,  # noqa: F401
                                                    NPUDistributedOptimizer, NPUOptimizer,
                                                    npu_allreduce,
                                                    npu_distributed_optimizer_wrapper)
from npu_bridge.estimator.npu.npu_plugin import npu_close  # noqa: F401
from npu_bridge.estimator.npu_unary_ops import npu_unary_ops  # noqa: F401
from npu_bridge.hccl import hccl_ops  # noqa: F401
from hccl.manage.api import (create_group, destroy_group,  # noqa: F401
                             get_group_rank_from_world_rank, get_world_rank_from_group_rank)
from hccl.split.api import set_split_strategy_by_idx, set_split_strategy_by_size  # noqa: F401

_precision.install_session_hook()


def _npu_optimizer_of(config):
    for custom in config.graph_options.rewrite_options.custom_optimizers:
        if custom.name == "NpuOptimizer":
            return custom
    custom = config.graph_options.rewrite_options.custom_optimizers.add()
    custom.name = "NpuOptimizer"
    return custom


def npu_config_proto(config_proto=None):
    """``config_proto`` (or a new ConfigProto) set up as the adapter does: the ``NpuOptimizer``
    custom optimizer present (its ``parameter_map``, e.g. ``precision_mode``, is honoured on CPU
    when a session is created), soft placement on, remapping and memory optimisation off."""
    if not isinstance(config_proto, config_pb2.ConfigProto):
        config_proto = config_pb2.ConfigProto()
    _npu_optimizer_of(config_proto)
    config_proto.allow_soft_placement = True
    config_proto.log_device_placement = False
    config_proto.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    config_proto.graph_options.rewrite_options.memory_optimization = RewriterConfig.OFF
    return config_proto


def npu_session_config_init(session_config=None):
    return npu_config_proto(session_config)


def npu_graph_options(graph_options=None):
    if not isinstance(graph_options, config_pb2.GraphOptions):
        graph_options = config_pb2.GraphOptions()
    graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return graph_options


def npu_optimizer_options(optimizer_options=None):
    if not isinstance(optimizer_options, config_pb2.OptimizerOptions):
        optimizer_options = config_pb2.OptimizerOptions()
    optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return optimizer_options


def npu_run_config_init(run_config=None):
    """The Estimator RunConfig to use: ``run_config`` (or a new one) with the NPU session config."""
    from npu_bridge import _estimator  # pylint: disable=import-outside-toplevel
    lib = _estimator.estimator_lib()
    if not isinstance(run_config, lib.RunConfig):
        run_config = lib.RunConfig()
    run_config.__dict__["_session_config"] = npu_config_proto(run_config.session_config)
    return run_config


def npu_hooks_append(hooks_list=()):
    """``hooks_list`` plus the variable-broadcast hook (a no-op at one rank), as a new list."""
    hooks = list(hooks_list) if isinstance(hooks_list, (list, tuple)) else []
    hooks.append(NPUBroadcastGlobalVariablesHook(0, get_rank_id()))
    return hooks


def npu_callbacks_append(callbacks_list=()):
    """``callbacks_list`` plus ``NPUBroadcastGlobalVariablesCallback(0)`` (a no-op at one rank),
    as a new list."""
    from npu_bridge.estimator.npu.npu_callbacks import (  # pylint: disable=import-outside-toplevel
        NPUBroadcastGlobalVariablesCallback)
    get_rank_size()  # reads RANK_SIZE (a malformed value raises)
    callbacks = list(callbacks_list) if isinstance(callbacks_list, (list, tuple)) else []
    callbacks.append(NPUBroadcastGlobalVariablesCallback(0))
    return callbacks


def _keras_backend():
    try:
        from tensorflow.python.keras import backend  # pylint: disable=import-outside-toplevel
        return backend
    except ImportError:
        return _tf.compat.v1.keras.backend


def _session_keras_backend(name):
    """``tf.compat.v1.keras.backend`` when it has TF1 sessions (Keras 2); else a clear error."""
    backend = _tf.compat.v1.keras.backend
    if not hasattr(backend, "set_session"):
        raise NotImplementedError(
            "npu_bridge.npu_init.%s is not emulated with this TensorFlow: its tf.keras is Keras 3, "
            "which has no TF1 sessions; TF1-style Keras scripts need Keras 2 (TensorFlow 2.15 "
            "and older)" % name)
    return backend


def set_keras_session_npu_config(config=None):
    """A Session with the NPU config, made Keras's session (TF1-style Keras); returns it."""
    backend = _session_keras_backend("set_keras_session_npu_config")
    config = npu_config_proto(config if isinstance(config, config_pb2.ConfigProto) else None)
    sess = _tf.compat.v1.Session(config=config)
    backend.set_session(sess)
    return sess


def npu_clear_session(config=None):
    backend = _session_keras_backend("npu_clear_session")
    backend.clear_session()
    backend.set_session(_tf.compat.v1.Session(config=npu_config_proto(config)))


def init_resource(config=None):
    """Opens the (emulated) device: returns ``(session, shutdown_op)`` as the adapter does."""
    config = npu_config_proto(config if isinstance(config, config_pb2.ConfigProto) else None)
    util.global_dict_init()
    npu_init = npu_ops.initialize_system()
    npu_shutdown = npu_ops.shutdown_system()
    sess = _tf.compat.v1.Session(config=config)
    sess.run(npu_init)
    util.set_value("npu_rank_id", get_rank_id())
    util.set_value("npu_local_rank_id", get_local_rank_id())
    util.set_value("npu_rank_size", get_rank_size())
    return sess, npu_shutdown


def shutdown_resource(sess, npu_shutdown):
    sess.run(npu_shutdown)


def close_session(sess):
    sess.close()


def get_npu_rank_id():
    return util.get_value("npu_rank_id", get_rank_id())


def get_npu_local_rank_id():
    return util.get_value("npu_local_rank_id", get_local_rank_id())


def get_npu_rank_size():
    return util.get_value("npu_rank_size", get_rank_size())


class NpuEmptyHook(_tf.compat.v1.train.SessionRunHook):
    """A hook that does nothing."""


def npu_keras_optimizer(opt):
    return KerasDistributeOptimizer(opt)


def npu_tf_optimizer(opt):
    return NPUDistributedOptimizer(opt)


def _importer_tf():
    """The ``tf`` of the module running ``from npu_bridge.npu_init import *`` (or tensorflow)."""
    frame = _sys._getframe(2)  # pylint: disable=protected-access
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_globals.get("__name__", "").startswith("importlib")):
        frame = frame.f_back
    if frame is not None and "tf" in frame.f_globals and frame.f_globals["tf"] is not None:
        return frame.f_globals["tf"]
    return _tf


# The Keras callback is imported when first asked for (it subclasses a tf.keras class).
__all__ = sorted(n for n in list(globals()) if not n.startswith("_")) + [
    "tf", "NPUBroadcastGlobalVariablesCallback"]
_fallback = _module_getattr(__name__, __all__)


def __getattr__(name):
    if name == "tf":
        return _importer_tf()
    if name == "NPUBroadcastGlobalVariablesCallback":
        from npu_bridge.estimator.npu import npu_callbacks  # pylint: disable=import-outside-toplevel
        return npu_callbacks.NPUBroadcastGlobalVariablesCallback
    return _fallback(name)
