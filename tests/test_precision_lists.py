"""precision_mode's lists: modify_mixlist (black/white/gray list changes by op type) and
keep_dtype_scope (per node), in TF1 sessions and TF2 code.

Expected values by hand: 300*300 + 1*1 = 90001, beyond float16's 65504, so a matmul lowered to
float16 gives 65504 (saturated, the register set) and one kept in float32 gives 90001. In
float16, 1.0001 is 1 (the spacing there is 2**-10), so [1.0001, 3] . [1, 1] is 4 when lowered
and float32's 1.0001 + 3 (NumPy) when not. exp(12) = 162754.79... > 65504.
"""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale.device import precision, precision_lists
from npu_loss_scale.device import register as emulation
from tf_versions import TF1, estimator_only, npu_device_only, tf2_only

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "ascend_mixlist_session.py")
F16_MAX = 65504.0
BLACK_MATMUL = {"black-list": {"to-add": ["MatMulV2"]}}
X, W = [[300.0, 1.0]], [[300.0], [1.0]]


@pytest.fixture
def lists(npu_shim):  # pylint: disable=unused-argument,redefined-outer-name
    """The shim (npu_bridge's npu_scope) installed; no process-wide list before or after."""
    precision_lists.set_modify_mixlist(None)
    os.environ.pop(precision_lists.ENV_VAR, None)
    yield
    precision_lists.set_modify_mixlist(None)
    os.environ.pop(precision_lists.ENV_VAR, None)


def write(tmp_path, spec, name="mixlist.json"):
    path = tmp_path / name
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return str(path)


def session_config(mode, mixlist_path=None):
    from npu_bridge.npu_init import npu_config_proto  # pylint: disable=import-outside-toplevel
    config = npu_config_proto()
    custom = config.graph_options.rewrite_options.custom_optimizers[0]
    custom.parameter_map["precision_mode"].s = mode.encode()
    if mixlist_path is not None:
        custom.parameter_map["modify_mixlist"].s = tf.compat.as_bytes(mixlist_path)
    return config


def run_session(fetches, config):
    """``fetches`` (each through a consumer: a rewritten op's own output shows float32) and
    whether the emulated register saw an overflow."""
    status = emulation.npu_get_float_status_v2()
    consumers = [f * 1.0 for f in fetches]
    with tf.compat.v1.Session(config=config) as sess:
        values = sess.run(consumers)
        return [v.ravel()[0] for v in values], bool(sess.run(status).any())


def matmul():
    return tf.matmul(tf.constant(X), tf.constant(W))


# -- TF1 sessions: the config's list ---------------------------------------------------------------
@pytest.mark.parametrize("spec, want, flagged", [
    (None, F16_MAX, True),                                           # MatMul is white: lowered
    ({}, F16_MAX, True),                                             # an empty list changes nothing
    (BLACK_MATMUL, 90001.0, False),                                  # to-add black: float32
    ({"black-list": {"to-add": ["MatMul"]}}, 90001.0, False),        # the other IR name
    ({"white-list": {"to-remove": ["MatMulV2"]}}, 90001.0, False),   # off white: gray
    ({"gray-list": {"to-add": ["MatMulV2"]}}, 90001.0, False),       # moved to gray
    ({"black-list": {"to-remove": ["MatMulV2"]}}, F16_MAX, True),    # was not black: unchanged
    ({"black-list": {"to-add": ["Conv2D"]}}, F16_MAX, True),         # another op type
])
def test_the_session_configs_modify_mixlist_decides_whether_a_matmul_is_lowered(
        lists, graph, tmp_path, spec, want, flagged):
    y = matmul()
    path = None if spec is None else write(tmp_path, spec)
    assert run_session([y], session_config("allow_mix_precision", path)) == ([want], flagged)


def test_a_black_listed_matmul_is_bit_exact_float32(lists, tmp_path):
    exact = np.float32(1.0001) + np.float32(3.0)
    assert exact != 4.0
    for path, want in ((None, 4.0), (write(tmp_path, BLACK_MATMUL), exact)):
        with tf.Graph().as_default():
            y = tf.matmul(tf.constant([[1.0001, 3.0]]), tf.constant([[1.0], [1.0]]))
            assert run_session([y], session_config("allow_mix_precision", path)) \
                == ([want], False)


def test_an_exp_saturates_on_the_white_list_and_not_on_the_black_list(lists, graph, tmp_path):
    y = tf.exp(tf.constant([12.0]))
    with tf.compat.v1.Session() as sess:   # no precision mode: float32
        plain = sess.run(y * 1.0)[0]
    assert 162754.0 < plain < 162755.0
    white = write(tmp_path, {"white-list": {"to-add": ["Exp"]}}, "white.json")
    black = write(tmp_path, {"black-list": {"to-add": ["Exp"]}}, "black.json")
    assert run_session([y], session_config("allow_mix_precision", white)) == ([F16_MAX], True)
    emulation.npu_clear_float_status_v2()
    assert run_session([y], session_config("allow_mix_precision", black)) == ([plain], False)
    # force_fp16 lowers Exp whatever a list says: the lists are for the mixed modes
    assert run_session([y], session_config("force_fp16", black)) == ([F16_MAX], True)


def test_the_table_maps_ascend_names_to_tensorflow_op_types(lists, graph, tmp_path):
    batched = tf.matmul(tf.constant([X]), tf.constant([W]))          # BatchMatMulV2
    assert batched.op.type.startswith("BatchMatMul")
    plain = matmul()
    config = session_config("allow_mix_precision",
                            write(tmp_path, {"black-list": {"to-add": ["BatchMatMulV2"]}}))
    assert run_session([batched, plain], config) == ([90001.0, F16_MAX], True)


def test_ascend_op_type_names_what_a_list_must_say_for_a_tensorflow_op_type():
    from npu_loss_scale.device.precision_rules import (  # pylint: disable=import-outside-toplevel
        FORCE_FP16_OPS)
    assert precision_lists.ascend_op_type("MatMul") == "MatMulV2"
    assert precision_lists.ascend_op_type("DepthwiseConv2dNative") == "DepthwiseConv2D"
    assert precision_lists.ascend_op_type("Exp") == "Exp"
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # every op the modes lower is in the table
        for tf_type in FORCE_FP16_OPS:   # and a black list of its name stops lowering it
            black = precision_lists.ModifyMixlist(
                {"black-list": {"to-add": [precision_lists.ascend_op_type(tf_type)]}})
            assert tf_type not in black.lowered(FORCE_FP16_OPS), tf_type


def test_keep_dtype_scope_keeps_one_matmul_in_float32_and_the_next_is_lowered(lists, graph):
    from npu_bridge.estimator.npu import npu_scope  # pylint: disable=import-outside-toplevel
    with npu_scope.keep_dtype_scope():
        kept = matmul()
    lowered = matmul()
    assert kept.op.get_attr("_keep_dtype") == 1
    assert run_session([kept, lowered], session_config("allow_mix_precision")) \
        == ([90001.0, F16_MAX], True)


def test_the_process_wide_list_applies_to_sessions_whose_config_names_none(
        lists, graph, tmp_path, monkeypatch):
    y = matmul()
    empty = write(tmp_path, {}, "empty.json")
    precision_lists.set_modify_mixlist(BLACK_MATMUL)
    assert run_session([y], session_config("allow_mix_precision"))[0] == [90001.0]
    emulation.npu_clear_float_status_v2()
    assert run_session([y], session_config("allow_mix_precision", empty)) == ([F16_MAX], True)
    precision_lists.set_modify_mixlist(None)
    monkeypatch.setenv(precision_lists.ENV_VAR, write(tmp_path, BLACK_MATMUL))
    y2 = matmul()
    assert run_session([y2], session_config("allow_mix_precision"))[0] == [90001.0]


@estimator_only
def test_npu_run_config_puts_modify_mixlist_into_the_session_config(lists, graph, tmp_path):
    from npu_bridge.npu_init import NPURunConfig  # pylint: disable=import-outside-toplevel
    path = write(tmp_path, BLACK_MATMUL)
    config = NPURunConfig(precision_mode="allow_mix_precision", modify_mixlist=path)
    custom = config.session_config.graph_options.rewrite_options.custom_optimizers[0]
    assert custom.parameter_map["modify_mixlist"].s == path.encode()
    assert run_session([matmul()], config.session_config)[0] == [90001.0]
    with pytest.raises(TypeError, match="modify_mixlist must be the path of a JSON file .*got 3"):
        NPURunConfig(modify_mixlist=3)


# -- bad lists -------------------------------------------------------------------------------------
@pytest.mark.parametrize("content, match", [
    ("not json", r"is not JSON .*black-list, white-list, gray-list"),
    ("[]", r"must hold a JSON object with the keys 'black-list', .*got list"),
    ('{"blacklist": {}}', r"has the key\(s\) 'blacklist'; accepted keys: 'black-list'"),
    ('{"black-list": ["MatMulV2"]}', r'"black-list" must be an object with the keys "to-add"'),
    ('{"black-list": {"add": []}}', r'"black-list" has the key\(s\) \'add\'; accepted keys: '
                                    r'"to-add", "to-remove"'),
    ('{"black-list": {"to-add": "MatMulV2"}}', r'"black-list" "to-add" must be an array of op '
                                               r'type names'),
    ('{"black-list": {"to-add": ["Exp"]}, "white-list": {"to-add": ["Exp"]}}',
     r"'Exp' is added to both \"black-list\" and \"white-list\""),
])
def test_a_bad_file_is_refused_naming_the_path_and_the_key(lists, graph, tmp_path, content,
                                                           match):
    path = write(tmp_path, content)
    with pytest.raises(ValueError, match=match) as info:
        precision_lists.load_modify_mixlist(path)
    assert path in str(info.value)
    matmul()
    with pytest.raises(ValueError, match=r'parameter_map\["modify_mixlist"\]: .*' + match):
        tf.compat.v1.Session(config=session_config("allow_mix_precision", path))


def test_a_missing_file_is_refused_naming_the_path(lists, tmp_path):
    path = str(tmp_path / "nowhere.json")
    with pytest.raises(ValueError, match="set_modify_mixlist: cannot read the file '%s'"
                       % path.replace("\\", "\\\\")):
        precision_lists.set_modify_mixlist(path)
    with pytest.raises(TypeError, match="must be the path of a JSON file .*got 7"):
        precision_lists.set_modify_mixlist(7)


def test_an_op_type_the_emulation_does_not_know_is_warned_once_by_name(lists):
    mixlist = precision_lists.ModifyMixlist({"black-list": {"to-add": ["NoSuchAscendOpX"]}})
    with pytest.warns(precision_lists.ModifyMixlistWarning, match="'NoSuchAscendOpX'"):
        assert mixlist.lowered({"MatMul", "NoSuchAscendOpX"}) == {"MatMul"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mixlist.lowered({"NoSuchAscendOpX"}) == frozenset()


# -- TF2 code --------------------------------------------------------------------------------------
def eager_matmul():
    return float(tf.matmul(tf.constant(X), tf.constant(W))[0, 0])


@tf2_only
def test_tf2_ops_follow_the_list_eagerly_and_in_functions(lists):
    function = tf.function(lambda: tf.matmul(tf.constant(X), tf.constant(W))[0, 0])
    try:
        precision.install_op_precision("allow_mix_precision")
        assert (eager_matmul(), float(function())) == (F16_MAX, F16_MAX)
        precision.install_op_precision("allow_mix_precision", BLACK_MATMUL)
        retraced = tf.function(lambda: tf.matmul(tf.constant(X), tf.constant(W))[0, 0])
        assert (eager_matmul(), float(retraced())) == (90001.0, 90001.0)
        precision_lists.set_modify_mixlist(BLACK_MATMUL)    # the process-wide list
        precision.install_op_precision("allow_mix_precision")
        assert eager_matmul() == 90001.0
    finally:
        precision.uninstall_op_precision()


@tf2_only
def test_keep_dtype_scope_in_a_tf_function_and_eagerly(lists):
    from npu_bridge.estimator.npu import npu_scope  # pylint: disable=import-outside-toplevel

    @tf.function
    def two():
        with npu_scope.keep_dtype_scope():
            kept = tf.matmul(tf.constant(X), tf.constant(W))
        return kept[0, 0], tf.matmul(tf.constant(X), tf.constant(W))[0, 0]

    emulation.npu_clear_float_status_v2()
    try:
        precision.install_op_precision("allow_mix_precision")
        assert [float(v) for v in two()] == [90001.0, F16_MAX]
        with npu_scope.keep_dtype_scope():      # ops run eagerly inside: no node, kept too
            assert eager_matmul() == 90001.0
        assert eager_matmul() == F16_MAX
    finally:
        precision.uninstall_op_precision()


@npu_device_only
def test_npu_device_global_options_modify_mixlist_applies_at_open(lists, tmp_path):
    import npu_device  # pylint: disable=import-outside-toplevel
    npu_device.global_options().precision_mode = "allow_mix_precision"
    npu_device.global_options().modify_mixlist = write(tmp_path, BLACK_MATMUL)
    try:
        npu_device.open()
        assert eager_matmul() == 90001.0
    finally:
        precision.uninstall_op_precision()


# -- npu-emulate --modify-mixlist ------------------------------------------------------------------
def test_emulate_refuses_a_bad_file_before_the_script_starts(tmp_path, capsys):
    from npu_loss_scale.cli import emulate_args  # pylint: disable=import-outside-toplevel
    path = write(tmp_path, '{"white": {}}')
    with pytest.raises(SystemExit) as info:
        emulate_args.parse(["--modify-mixlist", path, "train.py"])
    assert info.value.code == 2
    assert "--modify-mixlist: the file %r has the key(s) 'white'; accepted keys: 'black-list'" \
        % path in capsys.readouterr().err


@pytest.mark.slow
def test_emulate_modify_mixlist_reaches_an_unmodified_tf1_script(tmp_path):
    """The script sets precision_mode in its config and keeps one matmul in keep_dtype_scope
    (65504 without a list: run by hand); the command's list keeps the other in float32 too
    (--tf1 on TF 2, as it is on 1.15)."""
    def run(*options):
        out = subprocess.run(
            [sys.executable, "-m", "npu_loss_scale.emulate"] + list(options) + [SCRIPT],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False,
            cwd=str(tmp_path), env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    tf1 = [] if TF1 else ["--tf1"]
    path = write(tmp_path, BLACK_MATMUL)
    assert run(*(tf1 + ["--modify-mixlist", path])) \
        == {"kept": 90001.0, "lowered": 90001.0, "overflowed": False}
