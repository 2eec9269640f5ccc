"""Layer 2, agreement across ranks: every rank learns whether *any* rank overflowed, so all skip
the same steps (a sum of the status over the ranks, through TensorFlow collectives, Horovod,
HCCL or a ``tf.distribute`` strategy), and what went wrong when a peer is gone."""
from npu_loss_scale.agreement.core import (  # noqa: F401
    AGREEMENT_NAMES, TIMEOUT_ENV_VAR, DEFAULT_TIMEOUT_SECONDS, DEFAULT_GROUP_KEY,
    DEFAULT_INSTANCE_KEY_BASE, STATUS_ALLREDUCE_NAME, COLLECTIVE_OP_TYPES, AgreementError,
    explain_failure, failure_messages, Agreement, StrategyAgreement, HcclAgreement,
    HorovodAgreement, configure_horovod_timeouts, CollectiveCluster, configure_collective,
    get_collective_cluster, CollectiveAgreement, agreement_name, make_agreement,
    RanksMayDivergeWarning, multi_worker_reason, warn_if_ranks_may_diverge, count_collectives)

__all__ = [
    "AGREEMENT_NAMES", "TIMEOUT_ENV_VAR", "DEFAULT_TIMEOUT_SECONDS", "DEFAULT_GROUP_KEY",
    "DEFAULT_INSTANCE_KEY_BASE", "STATUS_ALLREDUCE_NAME", "COLLECTIVE_OP_TYPES",
    "AgreementError", "explain_failure", "failure_messages", "Agreement", "StrategyAgreement",
    "HcclAgreement", "HorovodAgreement", "configure_horovod_timeouts", "CollectiveCluster",
    "configure_collective", "get_collective_cluster", "CollectiveAgreement", "agreement_name",
    "make_agreement", "RanksMayDivergeWarning", "multi_worker_reason",
    "warn_if_ranks_may_diverge", "count_collectives",
]
