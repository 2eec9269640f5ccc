"""Agreement ``collective``: TensorFlow's own collective ops across the processes of a
:class:`~npu_loss_scale.agreement.CollectiveCluster` (graph mode)."""
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal.compat import collectives
from npu_loss_scale.agreement.base import STATUS_ALLREDUCE_NAME, Agreement
from npu_loss_scale.agreement.cluster import (CollectiveCluster, get_collective_cluster,
                                              timeout_seconds)
from npu_loss_scale.agreement.failures import record_reduce


class CollectiveAgreement(Agreement):
    """Sums the status with TF's ``CollectiveReduceV2`` over the processes of a
    :class:`CollectiveCluster` (graph mode; sessions on ``server.target``).

    A rank that waits ``timeout`` seconds for the others fails its step with
    ``DeadlineExceededError``. On TensorFlow 1.15, whose ``CollectiveReduce`` takes no timeout
    and cannot be cancelled, it logs an error and exits with status 124 instead.

    Args:
      cluster: a :class:`CollectiveCluster`; default :func:`get_collective_cluster`.
      timeout: seconds before a missing rank makes the all-reduce fail; default the cluster's.
      instance_key: the all-reduce's instance key; default the cluster's next one (each train
        op needs its own, equal on every rank: build train ops in the same order on all ranks).
      communication_hint: ``"auto"``, ``"ring"`` or ``"nccl"``.
    """

    name = "collective"

    def __init__(self, cluster=None, *, timeout=None, instance_key=None,
                 communication_hint="auto"):
        cluster = cluster if cluster is not None else get_collective_cluster()
        if cluster is None:
            raise RuntimeError(
                "agreement 'collective' needs a group of processes: call "
                "npu_loss_scale.agreement.configure_collective(cluster_spec, task_type, task_id) "
                "or set TF_CONFIG, and run the session on that task's tf.distribute.Server.")
        if not isinstance(cluster, CollectiveCluster):
            raise TypeError("cluster must be a CollectiveCluster; got %r" % (cluster,))
        self.cluster = cluster
        self.timeout = cluster.timeout if timeout is None else timeout_seconds(timeout)
        self._instance_key = instance_key
        self.communication_hint = _checks.one_of("communication_hint", communication_hint,
                                                 ("auto", "ring", "nccl"))

    def reduce(self, status):
        if tf.executing_eagerly():
            raise RuntimeError("agreement 'collective' works in graph mode (a tf.Graph run by "
                               "a Session on the task's server); in eager mode use a "
                               "tf.distribute strategy (agreement 'strategy').")
        key = self._instance_key
        if key is None:
            key = self.cluster.next_instance_key()
        with tf.device(self.cluster.device):
            out = collectives.all_reduce_sum(
                status, group_size=self.cluster.group_size, group_key=self.cluster.group_key,
                instance_key=key, communication_hint=self.communication_hint,
                timeout=self.timeout, name=STATUS_ALLREDUCE_NAME)
        record_reduce(out, self.name, self.timeout,
                       "TF CollectiveReduce%s over %d processes"
                       % ("V2" if collectives.HAS_TIMEOUT else "", self.cluster.group_size))
        return out

def collective_ready():
    """Whether a group of more than one process is configured (a bad ``TF_CONFIG`` is none)."""
    try:
        cluster = get_collective_cluster()
    except ValueError:
        return False
    return cluster is not None and cluster.group_size > 1


__all__ = ["CollectiveAgreement", "collective_ready"]
