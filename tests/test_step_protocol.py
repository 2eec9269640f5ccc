"""One step protocol for NPULossScaleOptimizer, its accumulation and Megatron's optimizer: each
train op built makes exactly one StepCheck (detection/step.py), and that object carries the
step's read, its agreement across ranks and the clears of what was read.

Expected values are hand counts: one train op = one StepCheck; one replica = one clear; the
agreement sees the status vector the read produced."""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale import agreement
from npu_loss_scale.detection import step as step_lib


class _Recorded(agreement.Agreement):
    """Sums over one rank (identity), remembering what it was asked to reduce."""

    def __init__(self):
        self.reduced = []

    def reduce(self, status):
        self.reduced.append(status)
        return tf.identity(status, name="overflow_status_allreduce")


@pytest.fixture
def started(monkeypatch):
    """The StepChecks the optimizers start, in order."""
    made = []
    original = step_lib.OverflowCheck.start

    def start(self, *args, **kwargs):
        made.append(original(self, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(step_lib.OverflowCheck, "start", start)
    return made


def _loss():
    w = tf.compat.v1.get_variable("w", initializer=np.array([1.0, 2.0], np.float32))
    x = tf.compat.v1.placeholder_with_default(np.float32(1.0), [], name="x")
    loss = tf.reduce_sum(tf.cast(nls.saturate(tf.cast(w * x, tf.float16)), tf.float32))
    return w, x, loss


def _sgd():
    return tf.compat.v1.train.GradientDescentOptimizer(1.0)


@pytest.mark.parametrize("make, runs", [
    (lambda ag: nls.NPULossScaleOptimizer(_sgd(), nls.FixedLossScaleManager(8), True,
                                          backend="emulation", agreement=ag), 1),
    (lambda ag: nls.NPULossScaleOptimizer(_sgd(), nls.FixedLossScaleManager(8), True,
                                          backend="emulation", agreement=ag,
                                          accumulation_steps=2), 2),
    (lambda ag: nls.MegatronMixedPrecisionOptimizer(_sgd(), nls.ConstantGradScaler(8.0),
                                                    is_distributed=True, backend="emulation",
                                                    agreement=ag), 1),
], ids=["optimizer", "accumulation", "megatron"])
def test_each_train_op_takes_one_step_check_through_read_agreement_and_end(graph, session,
                                                                          started, make, runs):
    recorded = _Recorded()
    w, x, loss = _loss()
    opt = make(recorded)
    train = opt.minimize(loss)
    assert len(started) == 1
    step = started[0]
    # The read: the status vector of this step's read, the one the agreement was handed.
    assert recorded.reduced == [step.status]
    assert step.status.shape.rank == 1
    # The agreement's answer is the verdict the skip decision took.
    assert step.verdict.op.name.endswith("overflow_status_allreduce")
    # The end: one clear of this optimizer's register slot, after the read.
    assert len(step.end_ops) == 1
    session.run(tf.compat.v1.global_variables_initializer())
    # 1e5 saturates in float16: the register is set and the (last, deciding) run skips.
    finite = [session.run([train, opt.overflow_status_reduce_all], {x: 1e5})[1]
              for _ in range(runs)]
    assert finite == [True] * (runs - 1) + [False]
    assert session.run(w).tolist() == [1.0, 2.0]


def test_a_strategy_step_reads_and_clears_each_replica_through_the_one_step_check(graph,
                                                                                  started):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        v = tf.compat.v1.Variable([1.0], name="v")
        opt = nls.NPULossScaleOptimizer(_sgd(), nls.FixedLossScaleManager(8.0),
                                        backend="emulation")
        strategy.extended.call_for_each_replica(lambda: opt.minimize(tf.reduce_sum(v * v)))
    assert len(started) == 1
    assert len(started[0].end_ops) == strategy.num_replicas_in_sync == 1
    assert started[0].verdict is started[0].status      # not distributed: nothing to sum
