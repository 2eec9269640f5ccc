"""npu_bridge's Keras distribution names and ``hccl_ops.reduce_scatter`` at N emulated ranks.

``python -m npu_loss_scale.emulate --ranks 2 [--tf1]`` runs tests/scripts/ascend_keras_two_rank.py
as two processes: a TF1 Keras session script (Keras 2) and the same training as TF2 code (eager
``model.fit``; Keras 2 on TF 2.15, Keras 3 on TF 2.16+). The expected values are computed here
with NumPy from each rank's data and initial weights. One rank, and RANK_SIZE > 1 outside a
``--ranks`` run, are checked in this process.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale import agreement
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation
from rank_lines import json_events
from tf_versions import tf2_only

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "ascend_keras_two_rank.py")
RANKS = (0, 1)


def _keras_2():
    return hasattr(tf.compat.v1.keras.backend, "get_session")


def _launch(args, tmp_path, expect_failure=False):
    env = dict(os.environ)
    for name in (detection.ENV_VAR, emulation.MODE_ENV_VAR, "RANK_SIZE", "RANK_ID", "TF_CONFIG"):
        env.pop(name, None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env[agreement.TIMEOUT_ENV_VAR] = "60"  # a wrong implementation fails instead of hanging
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", "--ranks", "2"]
                            + args, env=env, cwd=str(tmp_path), capture_output=True, text=True,
                            timeout=180, check=False)
    if expect_failure:
        assert result.returncode != 0, result.stdout[-4000:]
        return result
    assert result.returncode == 0, result.stderr[-4000:]
    events = json_events(result.stdout)
    return {r: [e for e in events if e["rank"] == r] for r in RANKS}


def _one(mine, event, model=None):
    found = [e for e in mine if e["event"] == event and e.get("model") == model]
    assert len(found) == 1, (event, model, mine)
    return found[0]


def _initial(rank):
    return (np.array([[0.1], [0.2], [-0.3]]) * (rank + 1), np.array([float(rank)]))


def _data(rank):
    rng = np.random.RandomState(rank)
    return rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 1)).astype(np.float32)


def _mse_gradient(kernel, bias, x, y):
    """Gradient of Keras's ``mse`` (mean over the batch) of ``x @ kernel + bias``."""
    err = x.astype(np.float64) @ kernel + bias - y
    return 2.0 * x.T @ err / len(x), 2.0 * err.sum(axis=0) / len(x)


def _expected(lr, momentum=0.0):
    """Both ranks from rank 0's weights, 2 batches of 4, each step with the mean over the ranks
    of their gradients (SGD: v = momentum * v - lr * g; w += v)."""
    kernel, bias = _initial(0)
    velocity = [np.zeros_like(kernel), np.zeros_like(bias)]
    data = [_data(r) for r in RANKS]
    for step in range(2):
        rows = slice(4 * step, 4 * step + 4)
        grads = [_mse_gradient(kernel, bias, x[rows], y[rows]) for x, y in data]
        mean = [np.mean([g[i] for g in grads], axis=0) for i in range(2)]
        velocity = [momentum * v - lr * g for v, g in zip(velocity, mean)]
        kernel, bias = kernel + velocity[0], bias + velocity[1]
    return kernel, bias


def _check_training(by_rank):
    want_wrapped = _expected(0.1)
    want_distribute = _expected(0.05, momentum=0.9)
    assert not np.allclose(want_wrapped[0], _expected(0.1, momentum=0.5)[0])  # sensitive enough
    for rank, mine in by_rank.items():
        # before the first batch each rank has its own weights; the callback then gives rank 1
        # rank 0's (exactly: a broadcast, not an average)
        begin = _one(mine, "train_begin", "wrapped")["weights"]
        np.testing.assert_allclose(begin[0], _initial(rank)[0], rtol=1e-6)
        first = _one(mine, "first_batch", "wrapped")["weights"]
        assert first == _one(by_rank[0], "train_begin", "wrapped")["weights"]
        for model, want in (("wrapped", want_wrapped), ("keras_distribute", want_distribute)):
            got = _one(mine, "train_end", model)["weights"]
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
            assert got == _one(by_rank[0], "train_end", model)["weights"]  # identical bits


def _check_reduce_scatter(by_rank):
    base = np.arange(1, 9, dtype=np.float32).reshape(4, 2)
    mine = {r: base * (r + 1) for r in RANKS}
    for rank in RANKS:
        got = _one(by_rank[rank], "reduce_scatter")
        rows = slice(2 * rank, 2 * rank + 2)       # rank r: part r of axis 0
        assert got["shape"] == [2, 2]
        assert got["sum"] == (mine[0] + mine[1])[rows].tolist()
        assert got["max"] == np.maximum(mine[0], mine[1])[rows].tolist()
        assert got["odd"] == ("hccl_ops.reduce_scatter: axis 0 of tensor must be a multiple of "
                              "rank_size=2; got shape (3, 2)")


@pytest.mark.distributed
def test_tf1_keras_session_script_averages_gradients_and_broadcasts_at_two_ranks(tmp_path):
    if not _keras_2():  # TF 2.16+: tf.keras is Keras 3, without TF1 sessions: said, not faked
        result = _launch(["--tf1", SCRIPT], tmp_path, expect_failure=True)
        assert "set_keras_session_npu_config is not emulated with this TensorFlow: its tf.keras " \
            "is Keras 3, which has no TF1 sessions" in result.stderr
        return
    by_rank = _launch(["--tf1", SCRIPT], tmp_path)
    _check_reduce_scatter(by_rank)
    _check_training(by_rank)


@pytest.mark.distributed
@tf2_only  # TF2 Keras fit
def test_tf2_keras_fit_averages_gradients_and_broadcasts_at_two_ranks(tmp_path):
    by_rank = _launch([SCRIPT, "--tf2"], tmp_path)
    _check_reduce_scatter(by_rank)
    _check_training(by_rank)


# -- one process ----------------------------------------------------------------------------------
@pytest.fixture
def shim(npu_shim):  # pylint: disable=unused-argument,redefined-outer-name
    yield


def test_reduce_scatter_is_the_identity_at_one_rank_and_needs_ranks_at_several(
        shim, graph, session, monkeypatch):
    from npu_bridge.hccl import hccl_ops  # pylint: disable=import-outside-toplevel
    t = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert session.run(hccl_ops.reduce_scatter(t, "sum", 1)).tolist() == session.run(t).tolist()
    with pytest.raises(ValueError, match="rank_size must equal RANK_SIZE=1; got 2"):
        hccl_ops.reduce_scatter(t, "sum", 2)
    with pytest.raises(ValueError, match="reduction must be one of sum, prod, max, min; got 'mean'"):
        hccl_ops.reduce_scatter(t, "mean", 1)
    monkeypatch.setenv("RANK_SIZE", "2")
    with pytest.raises(NotImplementedError, match=_OUTSIDE):
        hccl_ops.reduce_scatter(t, "sum", 2)


_OUTSIDE = ("hccl_ops.reduce_scatter|npu_distributed_optimizer_wrapper|KerasDistributeOptimizer|"
            "NPUBroadcastGlobalVariablesCallback): RANK_SIZE=2, but this process is not one of the "
            "ranks of `python -m npu_loss_scale.emulate --ranks N`")
_OUTSIDE = "(" + _OUTSIDE


def test_keras_names_are_the_identity_at_one_rank_and_need_ranks_at_several(shim, monkeypatch):
    from npu_bridge import npu_init  # pylint: disable=import-outside-toplevel
    opt = tf.keras.optimizers.SGD(0.1)
    assert npu_init.npu_distributed_optimizer_wrapper(opt) is opt
    assert npu_init.KerasDistributeOptimizer(opt) is opt
    assert npu_init.npu_keras_optimizer(opt) is opt
    assert not hasattr(opt, "_npu_device_all_reduced_gradients")
    callbacks = npu_init.npu_callbacks_append([])
    assert [type(c).__name__ for c in callbacks] == ["NPUBroadcastGlobalVariablesCallback"]
    callbacks[0].on_batch_begin(0)  # one rank: nothing to broadcast
    assert callbacks[0].broadcast_done
    with pytest.raises(ValueError, match="root_rank must be an int >= 0 .*; got -1"):
        npu_init.NPUBroadcastGlobalVariablesCallback(-1)
    monkeypatch.setenv("RANK_SIZE", "2")
    for call in (lambda: npu_init.npu_distributed_optimizer_wrapper(opt),
                 lambda: npu_init.KerasDistributeOptimizer(opt),
                 lambda: npu_init.npu_keras_optimizer(opt),
                 lambda: npu_init.NPUBroadcastGlobalVariablesCallback(0).on_batch_begin(0)):
        with pytest.raises(NotImplementedError, match=_OUTSIDE):
            call()
    assert not hasattr(opt, "_npu_device_all_reduced_gradients")
