"""Agreement backends in one process: choice, discovery, errors, wiring into the optimizer.

Multi-process proofs live in test_distributed_collective.py and test_distributed_horovod.py.
Here the other ranks are stood in for by fake all-reduce modules, which lets a test decide what
"the other rank" reports.
"""
import json
import sys
import types
import warnings

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from tf_versions import collective_v2_only
from npu_loss_scale import agreement
from npu_loss_scale.agreement import cluster as agreement_cluster
from npu_loss_scale.agreement import divergence
from npu_loss_scale.tools import graph_checks

WORLD_ENV = ("TF_CONFIG", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "RANK_SIZE",
             "WORLD_SIZE", agreement.TIMEOUT_ENV_VAR)


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    """Each test starts as a plain single process: no cluster, no launcher, no warning given."""
    for var in WORLD_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(agreement_cluster, "_configured_cluster", None)
    monkeypatch.setattr(agreement_cluster, "_tf_config_cluster", {})
    monkeypatch.delitem(sys.modules, "horovod.tensorflow", raising=False)
    monkeypatch.delitem(sys.modules, "npu_bridge.hccl.hccl_ops", raising=False)
    divergence._reset_divergence_warning()  # pylint: disable=protected-access
    yield
    divergence._reset_divergence_warning()  # pylint: disable=protected-access


def _two_workers(index=0, extra=None):
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    cluster.update(extra or {})
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


class _PeerStatus:
    """A fake all-reduce: adds what 'the other rank' reports, fed through a placeholder."""

    def __init__(self):
        self.calls = []
        self.peer = None

    def allreduce(self, status, *args, **kwargs):
        self.calls.append((args, kwargs))
        self.peer = tf.compat.v1.placeholder_with_default(tf.zeros_like(status), status.shape,
                                                          name="peer_status")
        return status + self.peer


def _fake_horovod(monkeypatch, initialized=True, size=2):
    fake = _PeerStatus()
    module = types.ModuleType("horovod.tensorflow")
    module.Sum = "Sum"
    module.allreduce = fake.allreduce
    module.is_initialized = lambda: initialized
    module.size = lambda: size
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", module)
    return fake


def _fake_hccl(monkeypatch):
    fake = _PeerStatus()
    module = types.ModuleType("npu_bridge.hccl.hccl_ops")
    module.allreduce = fake.allreduce
    monkeypatch.setitem(sys.modules, "npu_bridge.hccl.hccl_ops", module)
    return fake


def _model(n_vars=1):
    big = tf.compat.v1.placeholder_with_default(1.0, [], name="big")
    variables = [tf.compat.v1.get_variable("w%d" % i, initializer=tf.ones([3, 1]),
                                           use_resource=True) for i in range(n_vars)]
    x = tf.ones([2, 3]) * big
    y = tf.add_n([tf.matmul(x, v) for v in variables])
    y16 = nls.saturate(tf.cast(y, tf.float16))
    return big, variables, tf.reduce_mean(tf.square(tf.cast(y16, tf.float32)))


def _manager():
    return nls.ExponentialUpdateLossScaleManager(init_loss_scale=1024, incr_every_n_steps=100,
                                                 decr_every_n_nan_or_inf=1, decr_ratio=0.5)


# -- choice and errors -----------------------------------------------------------------------------
def test_agreement_names_include_every_backend():
    assert set(agreement.AGREEMENT_NAMES) == {"strategy", "hccl", "horovod", "collective"}


def test_unknown_agreement_name_is_rejected_naming_the_accepted_ones(graph):
    with pytest.raises(ValueError, match="agreement must be one of .*'collective'.*got 'mpi'"):
        nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                  _manager(), is_distributed=True, agreement="mpi")


def test_is_distributed_with_nothing_to_agree_through_fails_when_the_graph_is_built(graph):
    _, _, loss = _model()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                    _manager(), is_distributed=True)
    with pytest.raises(RuntimeError, match="is_distributed=True, but there is nothing to agree"):
        opt.minimize(loss)


def test_error_says_how_to_fix_it():
    with pytest.raises(RuntimeError) as info:
        agreement.make_agreement(None, "emulation")
    text = str(info.value)
    for hint in ("hvd.init()", "configure_collective", "TF_CONFIG", "is_distributed=False",
                 "'emulation'"):
        assert hint in text


def test_horovod_named_but_not_initialised_is_an_error(monkeypatch):
    _fake_horovod(monkeypatch, initialized=False)
    with pytest.raises(RuntimeError, match="Horovod is not initialised"):
        agreement.make_agreement("horovod", "emulation")


def test_collective_named_without_a_group_is_an_error():
    with pytest.raises(RuntimeError, match="configure_collective"):
        agreement.make_agreement("collective", "emulation")


# -- discovery -----------------------------------------------------------------------------------
def test_discovery_order_hccl_then_horovod_then_collective(monkeypatch):
    assert agreement.agreement_name(None, "emulation") is None
    monkeypatch.setenv("TF_CONFIG", _two_workers())
    assert agreement.agreement_name(None, "emulation") == "collective"
    _fake_horovod(monkeypatch)
    assert agreement.agreement_name(None, "emulation") == "horovod"
    _fake_hccl(monkeypatch)
    assert agreement.agreement_name(None, "emulation") == "horovod"   # HCCL needs the npu backend
    assert agreement.agreement_name(None, "npu") == "hccl"
    assert agreement.agreement_name("collective", "npu") == "collective"   # argument wins


def test_tf_config_with_a_single_worker_is_not_a_group(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                                                "task": {"type": "worker", "index": 0}}))
    assert agreement.agreement_name(None, "emulation") is None


def test_single_process_strategy_defers_to_a_process_level_backend(graph, monkeypatch):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        assert agreement.agreement_name(None, "emulation") == "strategy"
        _fake_horovod(monkeypatch)
        # MirroredStrategy on each Horovod rank: local replicas are summed by the strategy,
        # the processes by Horovod.
        assert agreement.agreement_name(None, "emulation") == "horovod"


def test_multi_worker_strategy_is_discovered_first(graph, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", _two_workers())
    _fake_horovod(monkeypatch)
    strategy = tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy()
    with strategy.scope():
        assert agreement.agreement_name(None, "emulation") == "strategy"


# -- a peer's overflow reaches this rank through the all-reduce --------------------------------
@pytest.mark.parametrize("choice", ["horovod", "hccl"])
def test_a_peer_overflow_arriving_through_the_allreduce_makes_this_rank_skip(
        graph, session, monkeypatch, choice):
    fake = _fake_horovod(monkeypatch) if choice == "horovod" else _fake_hccl(monkeypatch)
    big, (w,), loss = _model()
    mgr = _manager()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01), mgr,
                                    is_distributed=True, agreement=choice)
    gs = tf.compat.v1.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=gs)
    assert len(fake.calls) == 1
    if choice == "hccl":
        assert fake.calls[0] == (("sum",), {"fusion": 0})
    else:
        assert fake.calls[0][1]["op"] == "Sum"
    session.run(tf.compat.v1.global_variables_initializer())
    words = fake.peer.shape[0]

    # this rank and its peer are clean: applied
    _, finite = session.run([train, opt.overflow_status_reduce_all])
    w1 = session.run(w)
    assert finite and session.run(gs) == 1 and not np.all(w1 == 1.0)
    # this rank is clean, the peer overflowed: skipped here too, scale halves
    peer = np.zeros([words], np.float32)
    peer[0] = 1.0
    _, finite = session.run([train, opt.overflow_status_reduce_all], {fake.peer: peer})
    assert not finite
    assert session.run([gs, opt.skipped_steps, mgr.get_loss_scale()]) == [1, 1, 512.0]
    np.testing.assert_array_equal(session.run(w), w1)


def test_without_is_distributed_a_peer_overflow_is_never_seen(graph, session, monkeypatch):
    fake = _fake_horovod(monkeypatch, size=1)
    _, _, loss = _model()
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01),
                                    _manager(), is_distributed=False)
    gs = tf.compat.v1.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=gs)
    assert fake.calls == []
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(train)
    assert session.run(gs) == 1


# -- TF collectives, as built (run across processes in test_distributed_collective.py) ----------
@collective_v2_only
def test_collective_status_allreduce_is_one_op_whatever_the_number_of_gradients(graph):
    cluster = agreement.configure_collective({"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                                             "worker", 1, timeout=7)
    _, variables, loss = _model(n_vars=12)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                    _manager(), is_distributed=True)
    train = opt.minimize(loss)
    assert len(variables) == 12
    assert graph_checks.count_collectives(train) == 1
    ops = [op for op in graph.get_operations() if op.type == "CollectiveReduceV2"]
    assert len(ops) == 1
    op = ops[0]
    assert op.get_attr("timeout_seconds") == 7.0
    assert op.get_attr("merge_op") == b"Add" and op.get_attr("final_op") == b"Id"
    assert op.device == "/job:worker/replica:0/task:1/device:CPU:0"
    const = tf.get_static_value
    assert const(op.inputs[1]) == 2                                  # group_size
    assert const(op.inputs[2]) == cluster.group_key
    assert const(op.inputs[3]) == cluster.instance_key_base
    # a second train op gets the next instance key (same order on every rank)
    opt.minimize(loss)
    keys = sorted(const(o.inputs[3]) for o in graph.get_operations()
                  if o.type == "CollectiveReduceV2")
    assert keys == [cluster.instance_key_base, cluster.instance_key_base + 1]


def test_collective_cluster_from_tf_config_orders_chief_first(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["127.0.0.1:5"], "worker": ["127.0.0.1:6", "127.0.0.1:7"],
                    "ps": ["127.0.0.1:8"]},
        "task": {"type": "worker", "index": 1}}))
    cluster = agreement.get_collective_cluster()
    assert cluster.members == (("chief", 0), ("worker", 0), ("worker", 1))
    assert (cluster.group_size, cluster.rank) == (3, 2)
    assert cluster.leader == "/job:chief/replica:0/task:0"
    config = cluster.session_config(tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1))
    assert config.experimental.collective_group_leader == "/job:chief/replica:0/task:0"
    assert list(config.device_filters) == ["/job:worker/task:1"]
    assert config.intra_op_parallelism_threads == 1
    assert agreement.get_collective_cluster() is cluster   # one instance-key counter per run


@pytest.mark.parametrize("task", [{"type": "ps", "index": 0}, {"type": "evaluator", "index": 0}])
def test_non_member_tasks_have_no_group(monkeypatch, task):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": ["127.0.0.1:6", "127.0.0.1:7"], "ps": ["127.0.0.1:8"]},
        "task": task}))
    assert agreement.get_collective_cluster() is None


def test_collective_cluster_rejects_a_task_outside_the_cluster():
    with pytest.raises(ValueError, match=r"task_id must be one of \[0, 1\] for job 'worker'"):
        agreement.CollectiveCluster({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "worker", 2)
    with pytest.raises(ValueError, match="task_type must be one of 'worker'; got 'chief'"):
        agreement.CollectiveCluster({"worker": ["127.0.0.1:1"]}, "chief", 0)


def test_timeout_comes_from_argument_then_environment_then_default(monkeypatch):
    spec = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    assert agreement.CollectiveCluster(spec, "worker", 0).timeout == \
        agreement.DEFAULT_TIMEOUT_SECONDS
    monkeypatch.setenv(agreement.TIMEOUT_ENV_VAR, "12.5")
    assert agreement.CollectiveCluster(spec, "worker", 0).timeout == 12.5
    assert agreement.CollectiveCluster(spec, "worker", 0, timeout=3).timeout == 3.0
    monkeypatch.setenv(agreement.TIMEOUT_ENV_VAR, "soon")
    with pytest.raises(ValueError, match="NPU_LOSS_SCALE_AGREEMENT_TIMEOUT .* got 'soon'"):
        agreement.CollectiveCluster(spec, "worker", 0)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        agreement.CollectiveCluster(spec, "worker", 0, timeout=0)


def test_horovod_timeouts_are_set_before_init_without_overriding_the_user(monkeypatch):
    for var in ("HOROVOD_GLOO_TIMEOUT_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS",
                "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"):
        monkeypatch.setenv(var, "")   # records the variable, so the teardown restores it
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOROVOD_STALL_CHECK_TIME_SECONDS", "5")
    applied = agreement.configure_horovod_timeouts(40)
    assert applied == {"HOROVOD_GLOO_TIMEOUT_SECONDS": "40",
                       "HOROVOD_STALL_CHECK_TIME_SECONDS": "5",
                       "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "40"}


# -- tf.distribute strategy in one process -------------------------------------------------------
def test_mirrored_strategy_replica1_overflow_skips_the_step(graph):
    """Two replicas on two CPU devices; only replica 1's activations saturate. The optimizer
    sums the replicas' statuses inside TF's merge_call: the whole step is skipped."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        big = tf.compat.v1.placeholder_with_default(1.0, [], name="big")
        mgr = _manager()
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01), mgr,
                                        is_distributed=True)
        gs = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", initializer=tf.ones([3, 1]))

        def step_fn():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            x = tf.ones([2, 3]) * tf.where(tf.equal(replica, 1), big, 1.0)
            y16 = nls.saturate(tf.cast(tf.matmul(x, w), tf.float16))
            return opt.minimize(tf.reduce_mean(tf.square(tf.cast(y16, tf.float32))),
                                global_step=gs)

        train = strategy.group(strategy.extended.call_for_each_replica(step_fn))
        init = tf.compat.v1.global_variables_initializer()
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        _, finite = sess.run([train, opt.overflow_status_reduce_all])
        assert finite and sess.run([gs, opt.skipped_steps]) == [1, 0]
        before = sess.run(strategy.experimental_local_results(w))
        _, finite = sess.run([train, opt.overflow_status_reduce_all], {big: 1e6})
        assert not finite
        assert sess.run([gs, opt.skipped_steps, mgr.get_loss_scale()]) == [1, 1, 512.0]
        after = sess.run(strategy.experimental_local_results(w))
        for b, a in zip(before, after):
            np.testing.assert_array_equal(a, b)


# -- is_distributed=False in a multi-worker run ----------------------------------------------------
def test_single_process_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert agreement.warn_if_ranks_may_diverge() is False


@pytest.mark.parametrize("var,value", [("TF_CONFIG", _two_workers()), ("HOROVOD_SIZE", "4"),
                                       ("RANK_SIZE", "8"), ("OMPI_COMM_WORLD_SIZE", "2")])
def test_multi_worker_run_warns_once(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.warns(agreement.RanksMayDivergeWarning, match="is_distributed=True"):
        assert agreement.warn_if_ranks_may_diverge() is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert agreement.warn_if_ranks_may_diverge() is False


def test_initialised_horovod_with_several_ranks_warns(monkeypatch):
    _fake_horovod(monkeypatch, size=2)
    assert agreement.multi_worker_reason() == "Horovod is initialised with 2 ranks"
    _fake_horovod(monkeypatch, size=1)
    assert agreement.multi_worker_reason() is None


def test_no_warning_inside_a_strategy(graph, monkeypatch):
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        assert agreement.warn_if_ranks_may_diverge() is False


def test_optimizer_with_is_distributed_false_warns_once_in_a_multi_worker_run(graph, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", _two_workers())
    _, _, loss = _model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                            _manager(), is_distributed=False)
            opt.minimize(loss)
    diverge = [w for w in caught if issubclass(w.category, agreement.RanksMayDivergeWarning)]
    assert len(diverge) == 1, [str(w.message) for w in caught]
    assert "TF cluster of 2" in str(diverge[0].message)


def test_count_collectives_looks_into_cond_branches(graph, monkeypatch):
    agreement.configure_collective({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "worker", 0)
    coll = agreement.CollectiveAgreement(instance_key=5)
    flag = tf.compat.v1.placeholder(tf.bool, [])
    out = tf.cond(flag, lambda: coll.reduce(tf.ones([2])) + coll.reduce(tf.ones([2])),
                  lambda: tf.zeros([2]))
    assert graph_checks.count_collectives(out) == 2
    assert graph_checks.count_collectives(tf.zeros([1])) == 0


def test_the_old_name_of_count_collectives_warns_and_gives_the_moved_function():
    with pytest.warns(DeprecationWarning) as caught:
        old = agreement.count_collectives
    assert old is graph_checks.count_collectives
    assert [str(w.message) for w in caught] == [
        "npu_loss_scale.agreement.count_collectives is deprecated and will be removed in 0.4; "
        "use npu_loss_scale.tools.graph_checks.count_collectives instead"]
    assert caught[0].filename == __file__          # points at the line that used the old name
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        agreement.no_such_name  # pylint: disable=pointless-statement
