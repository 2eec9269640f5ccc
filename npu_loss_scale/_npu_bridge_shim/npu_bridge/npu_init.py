"""Shim of ``npu_bridge.npu_init``: what ``from npu_bridge.npu_init import *`` gives on CPU.

The loss-scale API resolves to :mod:`npu_loss_scale`; the session/run-config helpers return the
configuration they are given (there is no NPU graph optimizer to register on CPU); rank helpers
read RANK_SIZE / RANK_ID. Device-only names (NPUEstimator, NPURunConfig, npu_ops, ...) are not
provided.
"""
import os  # noqa: F401  (the adapter's npu_init exports it; scripts may rely on it)

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2  # noqa: F401
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig  # noqa: F401

from npu_bridge._ranks import (get_local_rank_id, get_local_rank_size, get_rank_id,  # noqa: F401
                               get_rank_size)
from npu_bridge.estimator.npu import npu_plugin  # noqa: F401
from npu_bridge.estimator.npu.npu_loss_scale_manager import (  # noqa: F401
    ExponentialUpdateLossScaleManager, FixedLossScaleManager, LossScaleManager)
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer  # noqa: F401
from npu_bridge.estimator.npu.npu_optimizer import NPUDistributedOptimizer, NPUOptimizer  # noqa: F401
from npu_bridge.hccl import hccl_ops  # noqa: F401


get_npu_rank_size = get_rank_size
get_npu_rank_id = get_rank_id
get_npu_local_rank_id = get_local_rank_id


def npu_config_proto(config_proto=None):
    """The session config to use: ``config_proto`` (or a new one) with soft placement on."""
    if not isinstance(config_proto, config_pb2.ConfigProto):
        config_proto = config_pb2.ConfigProto()
    config_proto.allow_soft_placement = True
    return config_proto


def npu_session_config_init(session_config=None):
    return npu_config_proto(session_config)


def npu_graph_options(graph_options=None):
    if not isinstance(graph_options, config_pb2.GraphOptions):
        graph_options = config_pb2.GraphOptions()
    return graph_options


def npu_optimizer_options(optimizer_options=None):
    if not isinstance(optimizer_options, config_pb2.OptimizerOptions):
        optimizer_options = config_pb2.OptimizerOptions()
    return optimizer_options


def npu_run_config_init(run_config=None):
    """The Estimator RunConfig to use: ``run_config`` (or a new one) with its session config."""
    if run_config is None:
        run_config = tf.estimator.RunConfig()
    return run_config.replace(session_config=npu_config_proto(run_config.session_config))


def npu_hooks_append(hooks_list=None):
    """The hooks to use: no variable broadcast is needed for the single emulated rank."""
    return list(hooks_list) if isinstance(hooks_list, (list, tuple)) else []
