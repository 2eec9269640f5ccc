"""Overflow localisation: the right op, the right direction, in order; nothing when off."""
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import localisation
from npu_loss_scale.device import saturation
from npu_loss_scale.frontends.hooks import LossScaleHook

from graph_walk import ancestors


@pytest.fixture(autouse=True)
def _localisation_off_afterwards():
    localisation.reset()
    yield
    localisation.disable()
    localisation.set_report_path(None)
    localisation.reset()


def _naive_softmax_model(big):
    """logits = x @ w (fp16, in range) -> exp (overflows for big logits) -> exp / sum(exp)."""
    x = tf.compat.v1.placeholder(tf.float16, [2, 4], name="x")
    w = tf.compat.v1.get_variable("w", initializer=tf.eye(4) * big)
    logits = tf.matmul(x, tf.cast(w, tf.float16), name="logits")
    with tf.name_scope("naive_softmax"):
        e = tf.exp(logits, name="Exp")
        probs = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    loss = -tf.reduce_mean(tf.math.log(tf.cast(probs, tf.float32) + 1e-3))
    return x, loss


def test_softmax_fed_huge_logits_is_localised_to_its_exp_forward():
    localisation.enable()
    with tf.Graph().as_default():
        with saturation.saturate_every_op():
            x, loss = _naive_softmax_model(4.0)
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.0),
                                            nls.FixedLossScaleManager(1.0))
            train = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train, {x: np.ones([2, 4], np.float16)})     # logits 4: exp(4) = 54.6
            assert localisation.last_record() is None
            sess.run(train, {x: np.full([2, 4], 3.0, np.float16)})  # logits 12: exp > 65504
            assert sess.run(opt.skipped_steps) == 1
    record = localisation.last_record()
    assert record.step == 2 and record.skipped is True
    first = record.first
    assert first.op_name == "naive_softmax/Exp"
    assert (first.direction, first.dtype, first.first, first.order) == ("forward", "float16",
                                                                         True, 0)
    assert math.isinf(first.magnitude)          # computed in float16: it never was in range
    assert record.sites[0] is first and not any(s.first for s in record.sites[1:])
    assert [s.order for s in record.sites] == list(range(len(record.sites)))
    names = [s.op_name for s in record.sites]
    assert "logits" not in names                 # in range: not a site
    # the sum of saturated exps overflows after the exp, in the forward pass
    assert names.index("naive_softmax/Sum") > 0
    assert record.sites[names.index("naive_softmax/Sum")].direction == "forward"


def test_backward_only_overflow_is_localised_to_the_gradient_op_of_that_input():
    localisation.enable()
    with tf.Graph().as_default() as graph:
        with saturation.saturate_every_op():
            x = tf.compat.v1.placeholder(tf.float16, [3], name="x")
            w = tf.compat.v1.placeholder(tf.float16, [3], name="w")
            y = tf.multiply(x, w, name="scale_mul")                 # 300 * 1: in range
            loss = tf.reduce_sum(tf.cast(y, tf.float32)) * 1024.0   # a loss scale of 1024
            grad_x, grad_w = tf.gradients(loss, [x, w])              # d/dw = 300 * 1024: over
        with tf.control_dependencies([grad_x, grad_w]):
            status = emulation.npu_get_float_status_v2()
        with tf.compat.v1.Session() as sess:
            feed = {x: [300.0, 1.0, 2.0], w: [1.0, 1.0, 1.0]}
            gx, gw, words = sess.run([grad_x, grad_w, status], feed)
    assert words[0] == 1 and np.all(np.abs(gx) <= 1024) and gw[0] == 65504
    record = localisation.last_record()
    assert record.skipped is None                     # a bare status read does not decide
    assert all(s.direction == "backward" for s in record.sites)
    first_op = graph.get_operation_by_name(record.first.op_name)
    assert first_op in ancestors([grad_w]) and first_op not in ancestors([grad_x])
    assert first_op.type == "Mul" and "scale_mul_grad" in first_op.name
    assert math.isinf(record.first.magnitude)


def test_magnitude_of_a_rounding_cast_is_the_wide_value_before_saturation():
    localisation.enable()
    with tf.Graph().as_default():
        wide = tf.constant([1.0, -310000.0, 2.0], tf.float32, name="wide_value")
        y = emulation.saturate(tf.cast(wide, tf.float16))
        with tf.control_dependencies([y]):   # the read after the saturation it reports
            status = emulation.npu_get_float_status_v2()
        with tf.compat.v1.Session() as sess:
            out, _ = sess.run([y, status])
    assert out[1] == -65504
    site = localisation.last_record().first
    assert site.op_name == "wide_value" and site.magnitude == 310000.0
    assert site.describe() == "wide_value (forward, fp16, 3.1e5)"


def test_nan_is_reported_as_nan_and_a_clear_discards_earlier_sites():
    localisation.enable()
    with tf.Graph().as_default():
        v = tf.compat.v1.placeholder(tf.float16, [2], name="v")
        y = emulation.saturate(tf.sqrt(v, name="root"))
        clear = emulation.npu_clear_float_status_v2()
        with tf.control_dependencies([y]):
            status = emulation.npu_get_float_status_v2()
        with tf.compat.v1.Session() as sess:
            sess.run(y, {v: [-1.0, 4.0]})            # noted, then discarded by the clear
            sess.run(clear)
            sess.run(status, {v: [4.0, 9.0]})
            assert localisation.last_record() is None
            sess.run(status, {v: [-1.0, 4.0]})
    site = localisation.last_record().first
    assert site.op_name == "root" and math.isnan(site.magnitude)
    assert len(localisation.last_record().sites) == 1


def test_localisation_off_adds_nothing_to_the_graph():
    def build():
        with tf.Graph().as_default() as g:
            with saturation.saturate_every_op():
                _, loss = _naive_softmax_model(4.0)
                nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                          nls.FixedLossScaleManager(1.0)).minimize(loss)
        return g
    def callbacks(graph):
        # the stuck-at-minimum warning is a callback of its own (in a TF1 graph its op is in the
        # graph; in TF2 control flow it is inside the cond's branch function)
        return [op for op in graph.get_operations()
                if op.type in ("PyFunc", "PyFuncStateless", "EagerPyFunc")
                and "warn_stuck_at_min_scale" not in op.name]
    assert localisation.get_mode() == localisation.OFF
    off = build()
    assert not callbacks(off)
    assert not [op for op in off.get_operations() if "overflow_site" in op.name]
    with localisation.localising():
        on = build()
    assert len(on.get_operations()) > len(off.get_operations())
    assert callbacks(on)
    # after the context, graphs are built without it again
    assert len(build().get_operations()) == len(off.get_operations())


def test_loss_scale_hook_logs_and_summarises_the_first_overflow(tmp_path):
    lines = []
    localisation.enable()
    with tf.Graph().as_default():
        with saturation.saturate_every_op():
            x, loss = _naive_softmax_model(4.0)
            tf.compat.v1.train.get_or_create_global_step()
            opt = nls.NPULossScaleOptimizer(
                tf.compat.v1.train.GradientDescentOptimizer(0.0),
                nls.ExponentialUpdateLossScaleManager(init_loss_scale=8.0, incr_every_n_steps=100,
                                                      decr_every_n_nan_or_inf=1,
                                                      decr_ratio=0.5))
            train = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        hook = LossScaleHook(optimizer=opt, every_n_steps=100, log_fn=lines.append,
                             output_dir=str(tmp_path))
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            sess.run(train, {x: np.ones([2, 4], np.float16)})
            sess.run(train, {x: np.full([2, 4], 3.0, np.float16)})
    record = localisation.last_record()
    expected = "step 2 skipped: first overflow at naive_softmax/Exp (forward, fp16, inf), " \
               "%d sites | loss scale 8 -> 4, skipped steps 1" % len(record.sites)
    assert expected in lines
    assert hook.history[1]["overflow_record"] is record and hook.history[0]["overflow_record"] \
        is None
    events = [f for f in os.listdir(str(tmp_path)) if "tfevents" in f]
    found = {}
    for event in tf.compat.v1.train.summary_iterator(os.path.join(str(tmp_path), events[0])):
        for value in event.summary.value:
            found[value.tag] = value
    assert found["loss_scale/overflow_sites"].simple_value == len(record.sites)
    assert found["loss_scale/first_overflow"].tensor.string_val[0].decode().startswith(
        "first overflow at naive_softmax/Exp")


SCRIPT = textwrap.dedent('''
    import numpy as np
    import tensorflow as tf
    from npu_bridge.npu_init import *   # noqa: F401,F403
    from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
    from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager
    {dump}
    tf.compat.v1.disable_eager_execution()
    x = tf.compat.v1.placeholder(tf.float16, [2, 4], name="x")
    w = tf.compat.v1.get_variable("w", initializer=tf.eye(4) * 4.0)
    logits = tf.matmul(x, tf.cast(w, tf.float16), name="logits")
    e = tf.exp(logits, name="big_exp")
    loss = tf.reduce_mean(tf.cast(e, tf.float32)) * 1e-3
    opt = NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.0),
                                FixedLossScaleManager({scale}))
    train = opt.minimize(loss)
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for k in (1.0, 3.0, 1.0, 3.0):
            sess.run(train, {{x: np.full([2, 4], k, np.float16)}})
''')


def _emulate(args, cwd):
    env = dict(os.environ)
    env.pop(emulation.MODE_ENV_VAR, None)
    env[detection.ENV_VAR] = "emulation"
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate"] + args, env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def test_emulate_overflow_report_is_json_lines_of_the_overflowed_steps(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(dump="", scale=1.0))
    report = tmp_path / "report.jsonl"
    done = _emulate(["--saturate-every-op", "--overflow-report", str(report), str(script)],
                    str(tmp_path))
    assert done.returncode == 0, done.stderr
    entries = [json.loads(line) for line in report.read_text().splitlines()]
    assert [e["step"] for e in entries] == [2, 4]
    for entry in entries:
        assert entry["skipped"] is True and entry["first"]["op_name"] == "big_exp"
        assert entry["first"]["direction"] == "forward" and entry["first"]["magnitude"] == "inf"
        assert entry["num_sites"] == len(entry["sites"]) and entry["sites"][0]["first"]
    assert "2 overflowed steps recorded" in done.stderr


def test_device_overflow_dump_config_gives_the_same_report_on_cpu(tmp_path):
    script = tmp_path / "script.py"
    dump = 'DumpConfig(enable_dump_debug=True, dump_path=%r, dump_debug_mode="all")' \
        % str(tmp_path / "dump")
    script.write_text(SCRIPT.format(dump=dump, scale=1.0))
    done = _emulate(["--saturate-every-op", str(script)], str(tmp_path))
    assert done.returncode == 0, done.stderr
    entries = localisation.read_report(str(tmp_path / "dump" / "overflow_report.jsonl"))
    assert [(e["step"], e["first"]["op_name"]) for e in entries] == [(2, "big_exp"),
                                                                     (4, "big_exp")]
    assert math.isinf(entries[0]["first"]["magnitude"])


def test_each_rank_of_several_writes_its_own_report_file(monkeypatch):
    monkeypatch.setenv("RANK_SIZE", "2")
    monkeypatch.setenv("RANK_ID", "1")
    assert localisation._per_rank("out/overflow.jsonl") == "out/overflow.rank1.jsonl"  # pylint: disable=protected-access
    monkeypatch.setenv("RANK_SIZE", "1")
    assert localisation._per_rank("out/overflow.jsonl") == "out/overflow.jsonl"  # pylint: disable=protected-access


def test_bad_mode_and_bad_environment_value_are_errors_naming_them(monkeypatch):
    with pytest.raises(ValueError, match="mode must be one of off, overflow, observe; got 'on'"):
        localisation.set_mode("on")
    monkeypatch.setenv(localisation.ENV_VAR, "maybe")
    with pytest.raises(ValueError, match="NPU_LOSS_SCALE_LOCALISE must be"):
        localisation._initial_mode()  # pylint: disable=protected-access
