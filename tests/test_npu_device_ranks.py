"""npu_device (the TF2 adapter) at N emulated ranks: ``python -m npu_loss_scale.emulate --ranks 2``
runs tests/scripts/ascend_tf2_two_rank.py as two processes; the expected values are computed
here, from the data and initial weights, with NumPy. One rank, and a rank count that is not a
``--ranks`` run, are checked in this process."""
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale import agreement
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation
from rank_lines import json_events

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "ascend_tf2_two_rank.py")
RANKS = (0, 1)


def _launch(args, tmp_path, expect_ok=True, collective_timeout="120"):
    env = dict(os.environ)
    for name in (detection.ENV_VAR, emulation.MODE_ENV_VAR, "RANK_SIZE", "RANK_ID", "TF_CONFIG",
                 agreement.TIMEOUT_ENV_VAR):
        env.pop(name, None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    if collective_timeout is not None:  # a wrong implementation fails instead of hanging
        env[agreement.TIMEOUT_ENV_VAR] = collective_timeout
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate"] + args, env=env,
                            cwd=str(tmp_path), capture_output=True, text=True, timeout=240,
                            check=False)
    if expect_ok:
        assert result.returncode == 0, result.stderr[-4000:]
    events = json_events(result.stdout)
    return events, result, time.monotonic() - started


def _by_rank(events, event):
    return {r: [e for e in events if e["event"] == event and e["rank"] == r] for r in RANKS}


def _one(events, event):
    """The single event of that kind on each rank (rank -> event without the rank)."""
    out = {}
    for rank, found in _by_rank(events, event).items():
        assert len(found) == 1, (event, rank, found)
        out[rank] = {k: v for k, v in found[0].items() if k != "rank"}
    return out


# -- two processes -----------------------------------------------------------------------------------
@pytest.mark.distributed
def test_two_ranks_exchange_through_every_npu_device_distribute_call(tmp_path):
    events, _, _ = _launch(["--ranks", "2", SCRIPT, "--phases", "collectives,fit"], tmp_path)
    # rank r contributes (r + 1) * its tensors: [1, 2], [[3, 4]] (int32), 5.0
    mine = {r: [np.array([1.0, 2.0]) * (r + 1), np.array([[3, 4]]) * (r + 1), 5.0 * (r + 1)]
            for r in RANKS}
    reducers = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
    before = _one(events, "before_open")
    for rank in RANKS:  # not opened yet: as on the device, nothing is exchanged
        assert before[rank]["value"] == rank + 1.0
        assert len(before[rank]["warnings"]) == 1
        assert "npu_device.open() has not been called" in before[rank]["warnings"][0]
    for rank, device in _one(events, "device").items():
        assert device == {"event": "device", "workers_num": 2, "worker_id": rank,
                          "cluster_worker": True}
    for rank, found in _by_rank(events, "all_reduce").items():
        assert [e["reduction"] for e in found] == ["mean", "sum", "max", "min", "prod"]
        for e in found:
            got = e["values"]
            assert got[1] is None
            if e["reduction"] == "mean":
                want = [(mine[0][i] + mine[1][i]) / 2 for i in range(3)]
                assert e["dtypes"] == ["float32", None, "float64", "float32"]
            else:
                want = [reducers[e["reduction"]](mine[0][i], mine[1][i]) for i in range(3)]
                assert e["dtypes"] == ["float32", None, "int32", "float32"]
            for g, w in zip([got[0], got[2], got[3]], want):
                np.testing.assert_allclose(g, w, rtol=1e-6)
    for rank, shapes in _one(events, "shapes").items():
        assert shapes["single"] == [6.0, -3.0]                 # (1 + 2) * [2, -1]
        assert shapes["pair_type"] == "list" and shapes["pair"] == [2.0, 10.0]  # max, a tuple in
    for rank, found in _by_rank(events, "function").items():
        # each call's own values: (call + 0) + (call + 1), and ones * (1 + 2)
        assert [e["values"] for e in found] == [[2.0 * c + 1, [[3.0] * 2] * 2] for c in range(3)]
    for rank, many in _one(events, "many_runs").items():
        assert many["values"] == [3.0 * c for c in range(100)]     # c * 1 + c * 2
        assert many["eager"] == [2.0 * c for c in range(100)]      # max(c * 1, c * 2)
    for rank, unknown in _one(events, "unknown_shape").items():
        assert unknown["values"] == [[3.0] * 2, [3.0] * 3]         # shapes known when they run
    for rank, nested in _one(events, "nested").items():
        # inner: a_0 + a_1 = 1 + 2 = 3; then the mean over the ranks of 3 + 1
        assert nested["value"] == 4.0
    for rank, got in _one(events, "broadcast").items():  # rank 1's values everywhere
        assert got == {"event": "broadcast", "returned": None, "weights": [2.0, -3.0],
                       "step": 20, "flag": False}
    for rank, got in _one(events, "shard").items():
        assert got["elements"] == list(range(10))[rank::2] and got["batch"] == 2
    for rank, errors in _one(events, "errors").items():
        assert errors["not_divisible"] == ("ValueError: shard_and_rebatch_dataset: global_bs "
                                           "must be divisible by the number of ranks 2; got 3")
        assert errors["root"] == ("ValueError: root_rank must be an int in [0, RANK_SIZE=2); "
                                  "got 2")
        assert errors["reduction"].startswith("ValueError: reduction must be one of mean, sum, "
                                              "max, min, prod; got 'avg'")
        assert errors["group"].startswith("NotEmulatedError: npu_device.distribute.all_reduce("
                                          "group='group_a')")
        assert "XLA-compiled function (jit_compile=True) is not emulated" in errors["xla"]

    # model.fit: 8 samples, global batch 4 -> 2 per rank, rank r gets samples r, r + 2, ...;
    # the weights start as rank 0's (broadcast); each step averages the ranks' gradients.
    done = _one(events, "fit_done")
    x, y = (np.array(a, np.float64) for a in done[0]["data"])
    init = _one(events, "fit_init")
    kernel = np.array(init[0]["weights"][0], np.float64).reshape(3, 1)
    bias = np.array(init[0]["weights"][1], np.float64)
    assert init[1]["weights"][0] != init[0]["weights"][0]  # the broadcast has work to do
    for step in range(2):
        grads = []
        for rank in RANKS:
            rows = list(range(8))[rank::2][2 * step:2 * step + 2]
            err = x[rows] @ kernel + bias - y[rows]
            grads.append((2 * x[rows].T @ err / len(rows), 2 * err.sum(0) / len(rows)))
        kernel = kernel - 0.01 * (grads[0][0] + grads[1][0]) / 2
        bias = bias - 0.01 * (grads[0][1] + grads[1][1]) / 2
    for rank in RANKS:
        assert done[rank]["batch"] == 2
        np.testing.assert_allclose(done[rank]["weights"][0], kernel.ravel(), rtol=1e-5)
        np.testing.assert_allclose(done[rank]["weights"][1], bias, rtol=1e-5)
    assert done[0]["weights"] == done[1]["weights"]
    assert _one(events, "done")


def _net_update(weights, xs, lr):
    """One SGD step of Dense(2) -> Dense(1) on the MSE, gradients averaged over the ranks."""
    k1, b1, k2, b2 = (np.array(w, np.float64) for w in weights)
    k1, k2 = k1.reshape(4, 2), k2.reshape(2, 1)
    grads = []
    for x in xs:
        h = x @ k1 + b1
        d_out = 2 * (h @ k2 + b2) / len(x)          # y = 0
        d_h = d_out @ k2.T
        grads.append([x.T @ d_h, d_h.sum(0), h.T @ d_out, d_out.sum(0)])
    mean = [(a + b) / 2 for a, b in zip(*grads)]
    return [(w - lr * g).ravel() for w, g in zip([k1, b1, k2, b2], mean)]


@pytest.mark.distributed
def test_loss_scale_optimizer_ranks_skip_together_when_one_rank_overflows(tmp_path):
    """Rank 1's second batch is scaled by 1e5: its float16 values saturate (no inf: only its
    emulated register knows). Agreeing, both ranks skip step 1, halve the scale 16 -> 8 and keep
    identical weights; every applied step is the NumPy update with the averaged gradient.
    ``unagreed`` (the agreement off) is the control: there rank 0 applies step 1 alone."""
    events, _, _ = _launch(["--saturate-every-op", "--ranks", "2", SCRIPT, "--phases", "lso"],
                           tmp_path)
    steps = _by_rank(events, "lso")
    xs = [np.full((2, 4), 0.5 * (r + 1)) for r in RANKS]
    for setup in ("loop", "inside", "outside", "eager"):
        mine = {r: [e for e in steps[r] if e["setup"] == setup] for r in RANKS}
        for rank in RANKS:
            assert [(e["scale_before"], e["finite"]) for e in mine[rank]] == \
                [(16.0, True), (16.0, False), (8.0, True)], (setup, rank)
            assert [e["weights"] for e in mine[rank]] == [e["weights"] for e in mine[0]], setup
        start = [[0.1] * 8, [0.0] * 2, [1.0] * 2, [0.0]]   # rank 0's initial weights
        after0 = _net_update(start, xs, 0.01)
        after2 = _net_update(after0, xs, 0.01)
        got = mine[0]
        assert got[1]["weights"] == got[0]["weights"], setup     # the skipped step changed nothing
        for want, have in ((after0, got[0]["weights"]), (after2, got[2]["weights"])):
            for w, h in zip(want, have):
                np.testing.assert_allclose(h, w, rtol=2e-3, atol=1e-5, err_msg=setup)
    control = {r: [e for e in steps[r] if e["setup"] == "unagreed"] for r in RANKS}
    assert [e["finite"] for e in control[0]][:2] == [True, True]
    assert [e["finite"] for e in control[1]][:2] == [True, False]
    assert control[0][1]["weights"] != control[1][1]["weights"]


@pytest.mark.distributed
def test_a_failing_rank_stops_the_rank_waiting_in_a_collective(tmp_path):
    """The TF2 collectives run without a timeout by default: rank 0 would wait for ever."""
    _, result, seconds = _launch(["--ranks", "2", SCRIPT, "--phases", "fail"], tmp_path,
                                 expect_ok=False, collective_timeout=None)
    assert result.returncode == 1
    assert "[1] RuntimeError: rank 1 fails on purpose" in result.stderr   # tagged with its rank
    assert '"not_reached"' not in result.stdout
    assert seconds < 100


@pytest.mark.distributed
def test_tf1_graphs_of_npu_device_scripts_exchange_through_their_sessions(tmp_path):
    events, _, _ = _launch(["--ranks", "2", SCRIPT, "--phases", "tf1"], tmp_path)
    for rank, got in _one(events, "tf1").items():
        assert got["mean"] == [[1.5, 3.0], 4.5]          # ([1, 2] + [2, 4]) / 2, (3 + 6) / 2
        assert got["weights"] == [1.0, 6.0]              # rank 1's


# -- one process -------------------------------------------------------------------------------------
def test_one_rank_is_the_identity_and_the_optimizer_decides_alone(npu_shim):  # pylint: disable=unused-argument
    import npu_device as npu  # pylint: disable=import-outside-toplevel
    from npu_device.train.optimizer import (  # pylint: disable=import-outside-toplevel
        NpuLossScaleOptimizer)
    device = npu.open().as_default()
    assert (device.workers_num, device.worker_id, device.is_cluster_worker()) == (1, 0, False)
    a, b = tf.constant([1.0, 2.0]), tf.constant(3)
    out = npu.distribute.all_reduce((a, None, b), "sum")
    assert out[1] is None and out[0].numpy().tolist() == [1.0, 2.0] and int(out[2]) == 3
    assert npu.distribute.all_reduce(a, "prod").numpy().tolist() == [1.0, 2.0]
    variable = tf.Variable([5.0])
    assert npu.distribute.broadcast([variable], root_rank=0) is None
    assert variable.numpy().tolist() == [5.0]
    dataset = tf.data.Dataset.range(5)
    assert npu.distribute.shard_and_rebatch_dataset(dataset, 3) == (dataset, 3)
    sgd = tf.keras.optimizers.SGD(0.5)
    assert npu.distribute.npu_distributed_keras_optimizer_wrapper(sgd) is sgd
    assert "apply" not in vars(sgd) and "apply_gradients" not in vars(sgd)

    opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.5), initial_scale=4.0)
    weight = tf.Variable([1.0])
    keras3 = hasattr(tf.keras.optimizers, "LossScaleOptimizer")

    @tf.function
    def step(grad):
        if keras3:
            opt.apply_gradients([(grad * opt.loss_scale, weight)])
        else:
            opt.apply_gradients([(grad, weight)])

    step(tf.constant([1.0]))
    assert weight.numpy().tolist() == [0.5] and float(opt.loss_scale) == 4.0
    step(tf.constant([np.inf], tf.float32))
    assert weight.numpy().tolist() == [0.5] and float(opt.loss_scale) == 2.0
    graph = step.get_concrete_function(tf.TensorSpec([1], tf.float32)).graph
    collectives = [op.type for op in graph.get_operations() if op.type.startswith("Collective")]
    assert collectives == []  # one rank: nothing to agree with


def test_bad_arguments_are_named_with_what_is_accepted(npu_shim):  # pylint: disable=unused-argument
    import npu_device as npu  # pylint: disable=import-outside-toplevel
    npu.open()
    distribute = npu.distribute
    with pytest.raises(ValueError, match=r"reduction must be one of mean, sum, max, min, prod; "
                                         r"got 'avg'"):
        distribute.all_reduce([tf.constant(1.0)], "avg")
    with pytest.raises(ValueError, match=r"reduce_reduction must be one of mean, sum, max, min, "
                                         r"prod; got 'median'"):
        distribute.npu_distributed_keras_optimizer_wrapper("sgd", reduce_reduction="median")
    with pytest.raises(ValueError, match=r"root_rank must be an int in \[0, RANK_SIZE=1\); got 1"):
        distribute.broadcast([tf.Variable(1.0)], root_rank=1)
    with pytest.raises(TypeError, match=r"values must be a variable or a list of variables .* "
                                        r"got <tf.Tensor.* at position 1"):
        distribute.broadcast([tf.Variable(1.0), tf.constant(2.0)])
    with pytest.raises(TypeError, match=r"dataset must be a tf.data.Dataset; got \[1, 2\]"):
        distribute.shard_and_rebatch_dataset([1, 2], 2)
    for bad in (0, 2.0, True, "8"):
        with pytest.raises(ValueError, match=r"global_bs must be an int >= 1 .*; got %s"
                                             % repr(bad).replace(".", r"\.")):
            distribute.shard_and_rebatch_dataset(tf.data.Dataset.range(2), bad)
    with pytest.raises(TypeError, match=r"optimizer must be a Keras optimizer.*got 42"):
        distribute.npu_distributed_keras_optimizer_wrapper(42)
    assert isinstance(distribute.npu_distributed_keras_optimizer_wrapper("sgd"),
                      tf.keras.optimizers.SGD)


def test_several_ranks_outside_a_ranks_run_name_the_option(npu_shim, monkeypatch):  # pylint: disable=unused-argument
    import npu_device as npu  # pylint: disable=import-outside-toplevel
    monkeypatch.setenv("RANK_SIZE", "2")
    monkeypatch.setenv("RANK_ID", "0")
    calls = {
        "npu_device.open": npu.open,
        "npu_device.distribute.all_reduce": lambda: npu.distribute.all_reduce(tf.constant(1.0)),
        "npu_device.distribute.shard_and_rebatch_dataset":
            lambda: npu.distribute.shard_and_rebatch_dataset(tf.data.Dataset.range(4), 4),
        "npu_device.distribute.npu_distributed_keras_optimizer_wrapper":
            lambda: npu.distribute.npu_distributed_keras_optimizer_wrapper("sgd"),
    }
    for name, call in calls.items():
        with pytest.raises(NotImplementedError, match=r"^%s: RANK_SIZE=2, .* Start the script "
                                                      r"with --ranks 2" % name.replace(".", r"\.")):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                call()
