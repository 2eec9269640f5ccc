"""What an agreement is: :class:`Agreement` (one way for ranks to sum the overflow status), the
pass-through :class:`StrategyAgreement`, and the names every agreement shares."""
import tensorflow as tf

AGREEMENT_NAMES = ("strategy", "hccl", "horovod", "collective")

STATUS_ALLREDUCE_NAME = "overflow_status_allreduce"

# Op types that carry data between ranks; used to count collectives per step.
COLLECTIVE_OP_TYPES = frozenset([
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather",
    "CollectiveGatherV2", "CollectiveBcastSend", "CollectiveBcastRecv", "CollectiveBcastSendV2",
    "CollectiveBcastRecvV2", "CollectiveAllToAllV2", "CollectiveAllToAllV3",
    "NcclAllReduce", "HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather",
    "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter", "HcomAllReduce",
])


class Agreement:
    """One way for ranks to agree on the overflow status.

    ``reduce(status)`` takes this rank's float32 status vector (all zeros = no overflow) and
    returns the element-wise sum over all ranks, so that every rank computes the same
    ``finite = reduce_all(status == 0)``. It adds :attr:`collectives_per_step` collectives to the
    graph, whatever the number of gradients.
    """

    name = None
    collectives_per_step = 1

    def reduce(self, status):
        raise NotImplementedError

    def __repr__(self):
        return "<%s agreement>" % self.name


class StrategyAgreement(Agreement):
    """Inside a ``tf.distribute`` strategy: the optimizer's ``distribution.reduce(SUM, ...)`` of
    the per-replica statuses already spans every replica and worker of the strategy, so the
    status arrives here agreed upon and passes through unchanged."""

    name = "strategy"

    def reduce(self, status):
        if not tf.distribute.has_strategy():
            raise RuntimeError(
                "agreement='strategy' needs a tf.distribute strategy in scope when the train op "
                "is built (build it inside strategy.scope() / strategy.run); none is, so ranks "
                "would not agree. Pass agreement='horovod', 'hccl' or 'collective' instead, or "
                "leave agreement=None to discover one.")
        return status



__all__ = ["AGREEMENT_NAMES", "STATUS_ALLREDUCE_NAME", "COLLECTIVE_OP_TYPES", "Agreement",
           "StrategyAgreement"]
