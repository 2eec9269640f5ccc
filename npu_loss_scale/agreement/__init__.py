"""Agreement across ranks on the overflow status: every rank applies or skips the same steps.

With ``is_distributed=True`` the overflow status of each rank is summed over all ranks with *one*
collective per step (whatever the number of gradients), so a rank that overflowed makes every
rank skip, and loss scales, counters and ``global_step`` never diverge. In saturation mode this
is the only way a rank learns of another rank's overflow: the device register is per device and
the saturated gradients look finite.

The ways to agree (``AGREEMENT_NAMES``):

``strategy``
    Inside a ``tf.distribute`` strategy the optimizer sums the per-replica statuses with the
    strategy's own ``reduce`` (one all-reduce, inside TensorFlow's ``merge_call`` structure),
    over every replica and worker of the strategy. Nothing more is needed.
``hccl``
    ``npu_bridge.hccl.hccl_ops.allreduce(status, "sum")`` on Ascend devices (``npu`` backend).
``horovod``
    ``horovod.tensorflow.allreduce(status, op=Sum)``, after ``hvd.init()``.
``collective``
    TensorFlow's own collective ops (``CollectiveReduceV2``) in graph mode, across processes that
    each run a ``tf.distribute.Server``. The group comes from :func:`configure_collective` or
    from ``TF_CONFIG``; see :class:`CollectiveCluster`.

The choice is the optimizer's ``agreement=`` argument, else discovered in this order:

1. a ``tf.distribute`` strategy in scope that spans processes -> ``strategy``;
2. ``npu_bridge`` HCCL importable with the ``npu`` detection backend -> ``hccl``;
3. Horovod imported and initialised -> ``horovod``;
4. a collective group configured with :func:`configure_collective`, or a ``TF_CONFIG`` naming
   more than one chief/worker task -> ``collective``;
5. a single-process strategy (e.g. ``MirroredStrategy``) in scope -> ``strategy``.

(A single-process strategy inside a multi-process job - say ``MirroredStrategy`` on each Horovod
rank - sums over its local replicas first; the process-level backend then sums over processes.)
When ``is_distributed=True`` and nothing is found, building the train op raises an error
instead of letting ranks silently diverge; :func:`agreement_name` tells what would be used.

No hangs: a rank that dies or never joins makes the others fail within a bounded time.
``collective`` passes a timeout to every collective (``timeout=`` / :func:`configure_collective`,
else ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT`` seconds, else 300 s) and raises
``DeadlineExceededError: Collective has timed out ...`` on the surviving ranks. ``horovod``
relies on Horovod's own timeouts, which :func:`configure_horovod_timeouts` sets before
``hvd.init()``. Wrap the training loop's ``session.run`` calls in :func:`failure_messages` (or
pass an error to :func:`explain_failure`) to turn such a failure into an
:class:`AgreementError` whose message names the backend and its timeout.

Example (Horovod)::

    import horovod.tensorflow as hvd
    import npu_loss_scale as nls
    from npu_loss_scale import agreement

    agreement.configure_horovod_timeouts(60)      # before hvd.init()
    hvd.init()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    opt = nls.NPULossScaleOptimizer(opt, nls.FixedLossScaleManager(1024), is_distributed=True)
    assert agreement.agreement_name() == "horovod"

Layer 2 of the package: it imports only ``_internal``. One idea per module: :mod:`.base` (what
an agreement is), :mod:`.cluster` (the collective group and the timeouts), :mod:`.hccl`,
:mod:`.horovod` (with :mod:`.watchdog`), :mod:`.collective`, :mod:`.discovery` (which one to
use), :mod:`.failures` (what went wrong) and :mod:`.divergence` (``is_distributed=False`` on
one rank of several).
"""
from npu_loss_scale._internal import moved as _moved
from npu_loss_scale.agreement.base import (AGREEMENT_NAMES, COLLECTIVE_OP_TYPES,
                                           STATUS_ALLREDUCE_NAME, Agreement, StrategyAgreement)
from npu_loss_scale.agreement.cluster import (DEFAULT_GROUP_KEY, DEFAULT_INSTANCE_KEY_BASE,
                                              DEFAULT_TIMEOUT_SECONDS, TIMEOUT_ENV_VAR,
                                              CollectiveCluster, configure_collective,
                                              get_collective_cluster)
from npu_loss_scale.agreement.collective import CollectiveAgreement
from npu_loss_scale.agreement.discovery import agreement_name, make_agreement
from npu_loss_scale.agreement.divergence import (RanksMayDivergeWarning, multi_worker_reason,
                                                 warn_if_ranks_may_diverge)
from npu_loss_scale.agreement.failures import AgreementError, explain_failure, failure_messages
from npu_loss_scale.agreement.hccl import HcclAgreement
from npu_loss_scale.agreement.horovod import HorovodAgreement, configure_horovod_timeouts

__all__ = [
    "AGREEMENT_NAMES", "TIMEOUT_ENV_VAR", "DEFAULT_TIMEOUT_SECONDS", "DEFAULT_GROUP_KEY",
    "DEFAULT_INSTANCE_KEY_BASE", "STATUS_ALLREDUCE_NAME", "COLLECTIVE_OP_TYPES",
    "AgreementError", "explain_failure", "failure_messages", "Agreement", "StrategyAgreement",
    "HcclAgreement", "HorovodAgreement", "configure_horovod_timeouts", "CollectiveCluster",
    "configure_collective", "get_collective_cluster", "CollectiveAgreement", "agreement_name",
    "make_agreement", "RanksMayDivergeWarning", "multi_worker_reason",
    "warn_if_ranks_may_diverge",
]


def __getattr__(name):
    # count_collectives moved to npu_loss_scale.tools.graph_checks (a tool over a built graph,
    # above this layer); the old name answers for one release, with a DeprecationWarning.
    return _moved.moved_name(__name__, name, __file__)
