"""The warning for ``is_distributed=False`` in what looks like one rank of several: each rank
would then decide alone whether to skip a step, and the ranks would drift apart."""
import os
import sys
import threading
import warnings

import tensorflow as tf

from npu_loss_scale._internal import env as rank_env
from npu_loss_scale._internal import messages as _messages
from npu_loss_scale.agreement.cluster import get_collective_cluster
from npu_loss_scale.agreement.horovod import horovod_size

RanksMayDivergeWarning = _messages.RanksMayDivergeWarning


_ENV_WORLD_SIZES = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "RANK_SIZE", "WORLD_SIZE")
_warned = False
_warn_lock = threading.Lock()


def multi_worker_reason():
    """Why this process looks like one rank of several, or None in a single-process run.

    Looks at an initialised Horovod, the launcher environment variables (``HOROVOD_SIZE``,
    ``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``, Ascend's ``RANK_SIZE``, ``WORLD_SIZE``), a
    :func:`configure_collective` group and ``TF_CONFIG``.
    """
    size = horovod_size()
    if size is not None and size > 1:
        return "Horovod is initialised with %d ranks" % size
    for var in _ENV_WORLD_SIZES:
        try:
            size = rank_env.env_int(var, 1)
        except ValueError:    # not a launcher's value: no sign of several ranks
            continue
        if size > 1:
            return "%s=%d" % (var, size)
    try:
        cluster = get_collective_cluster()
    except ValueError:
        cluster = None
    if cluster is not None and cluster.group_size > 1:
        return "a TF cluster of %d chief/worker tasks is configured" % cluster.group_size
    return None


def warn_if_ranks_may_diverge():
    """Warns once per process when ``is_distributed=False`` in what looks like a multi-rank run.

    The optimizer calls it when it builds a train op with ``is_distributed=False``. Inside a
    ``tf.distribute`` strategy it stays silent: the optimizer sums the status over the
    strategy's replicas anyway. Returns True when it warned (this call), else False.
    """
    global _warned
    if _warned or tf.distribute.has_strategy():
        return False
    reason = multi_worker_reason()
    if reason is None:
        return False
    with _warn_lock:
        if _warned:
            return False
        _warned = True
    warnings.warn(
        "npu_loss_scale: NPULossScaleOptimizer was built with is_distributed=False, but this "
        "process looks like one rank of several (%s). Each rank will decide alone whether to "
        "skip a step, so after an overflow on one rank the ranks' loss scales, global_step and "
        "variables may diverge. Pass is_distributed=True (see docs/distributed.md)." % reason,
        RanksMayDivergeWarning, stacklevel=_caller_stacklevel())
    return True


def _caller_stacklevel():
    """The warnings stacklevel of the first frame outside this package and TensorFlow, so the
    warning points at the user's minimize()/apply_gradients() call."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    internal = (package, os.path.dirname(os.path.abspath(tf.__file__)))
    frame = sys._getframe(2)  # pylint: disable=protected-access  # warn_if_ranks_may_diverge's caller
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(internal):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 2


def _reset_divergence_warning():
    """Lets :func:`warn_if_ranks_may_diverge` warn again (for tests)."""
    global _warned
    with _warn_lock:
        _warned = False



__all__ = ["RanksMayDivergeWarning", "multi_worker_reason", "warn_if_ranks_may_diverge"]
