"""scripts/survey_ascend_scripts.py on a small corpus of Ascend-shaped scripts written here."""
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SURVEY = os.path.join(os.path.dirname(HERE), "scripts", "survey_ascend_scripts.py")


def _load():
    spec = importlib.util.spec_from_file_location("survey_ascend_scripts", SURVEY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(textwrap.dedent(text))


@pytest.fixture
def corpus(tmp_path):
    root = str(tmp_path / "zoo")
    # model 1: star import, Estimator, npu_ops.dropout; a helper file in a sub-folder
    _write(root, "TensorFlow/cv/ResNet_ID0001_for_TensorFlow/modelzoo_level.txt", "x\n")
    _write(root, "TensorFlow/cv/ResNet_ID0001_for_TensorFlow/train.py", """
        import tensorflow.compat.v1 as tf
        from npu_bridge.npu_init import *
        from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
        def model_fn(features, labels, mode):
            x = npu_ops.dropout(features, 0.9)
            opt = NPULossScaleOptimizer(tf.train.AdamOptimizer(), FixedLossScaleManager(1024))
            return NPUEstimatorSpec(mode=mode, loss=tf.reduce_sum(x), train_op=opt.minimize(x))
        config = NPURunConfig(iterations_per_loop=10, precision_mode="allow_mix_precision")
        est = NPUEstimator(model_fn=model_fn, config=config)
        undefined_thing(tf.placeholder)   # neither npu_init's nor npu's
        """)
    _write(root, "TensorFlow/cv/ResNet_ID0001_for_TensorFlow/src/layers.py", """
        from npu_bridge.estimator.npu_unary_ops import npu_unary_ops
        def act(x):
            return npu_unary_ops.gelu(x)
        """)
    # model 2: a name the shim lacks (a module of the adapter not emulated), and Python 2 code
    _write(root, "TensorFlow/nlp/Tacotron_ID0002_for_TensorFlow/train.py", """
        from npu_bridge.estimator.npu.npu_loss_scale_manager import (
            ExponentialUpdateLossScaleManager)
        from npu_bridge.estimator.npu.npu_strategy import NPUStrategy
        from npu_bridge.hccl import hccl_ops
        hccl_ops.broadcast([v], 0)
        """)
    _write(root, "TensorFlow/nlp/Tacotron_ID0002_for_TensorFlow/old.py", "print 'python 2'\n")
    # not a loss-scale model: ignored
    _write(root, "TensorFlow/cv/NoScale_ID0003_for_TensorFlow/train.py", """
        from npu_bridge.npu_init import *
        sess = tf.Session(config=npu_config_proto())
        """)
    # a commented-out optimizer does not make a loss-scale file
    _write(root, "TensorFlow/cv/Commented_ID0004_for_TensorFlow/train.py", """
        # opt = NPULossScaleOptimizer(opt, manager)
        from npu_bridge.npu_init import *
        """)
    return root


def test_survey_ranks_names_by_model_directories_and_measures_coverage(corpus):
    survey = _load()
    result = survey.survey(corpus)
    assert (result["loss_scale_files"], result["model_dirs"]) == (2, 2)
    assert result["unparsable_files"] == 1
    names = {e["name"]: (e["dirs"], e["provided"]) for e in result["names"]}
    npu = "npu_bridge.estimator.npu."
    assert names == {
        npu + "npu_loss_scale_optimizer.NPULossScaleOptimizer": (1, True),
        npu + "npu_loss_scale_manager.FixedLossScaleManager": (1, True),
        npu + "npu_loss_scale_manager.ExponentialUpdateLossScaleManager": (1, True),
        "npu_bridge.estimator.npu_ops.dropout": (1, True),
        npu + "npu_estimator.NPUEstimatorSpec": (1, True),
        npu + "npu_estimator.NPUEstimator": (1, True),
        npu + "npu_config.NPURunConfig": (1, True),
        "npu_bridge.estimator.npu_unary_ops.npu_unary_ops": (1, True),
        "npu_bridge.estimator.npu_unary_ops.npu_unary_ops.gelu": (1, True),
        npu + "npu_strategy.NPUStrategy": (1, False),
        "npu_bridge.hccl.hccl_ops": (1, True),
        "npu_bridge.hccl.hccl_ops.broadcast": (1, True),
    }
    assert result["covered_dirs"] == 1
    missing = {d: info["missing"] for d, info in result["dirs"].items()}
    assert missing == {
        os.path.join("TensorFlow", "cv", "ResNet_ID0001_for_TensorFlow"): [],
        os.path.join("TensorFlow", "nlp", "Tacotron_ID0002_for_TensorFlow"):
            [npu + "npu_strategy.NPUStrategy"],
    }


@pytest.mark.tf_independent   # the scripts read as text, the shim stood in for
def test_survey_ranking_uses_the_given_provider_and_prints_a_table(corpus):
    survey = _load()
    result = survey.survey(corpus, provides=lambda name: "dropout" not in name)
    assert result["covered_dirs"] == 1  # only the Tacotron directory (no dropout there)
    table = survey.format_table(result)
    assert "| `npu_ops.dropout` | 1 | **no** | 1 |" in table
    assert survey.format_summary(result).endswith("in 1 of 2 model directories (50%)")


@pytest.mark.slow
def test_survey_command_prints_the_table_and_coverage(corpus, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = tmp_path / "survey.json"
    result = subprocess.run([sys.executable, SURVEY, corpus, "--json", str(out), "--missing"],
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "coverage: the shim provides every npu_bridge/npu_device/hccl/moxing name used in 1 " \
           "of 2 model directories (50%)" in result.stdout
    assert "npu_strategy.NPUStrategy" in result.stdout and out.exists()
    bad = subprocess.run([sys.executable, SURVEY, str(tmp_path / "nowhere")], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "CORPUS_DIR must be an existing folder" in bad.stderr


@pytest.mark.tf_independent   # the scripts read as text, the shim stood in for
def test_mindspore_scripts_are_not_tensorflow_loss_scale_files(tmp_path):
    root = str(tmp_path / "zoo")
    _write(root, "TensorFlow/audio/Tagger_for_TensorFlow/train.py", """
        from mindspore.train.loss_scale_manager import FixedLossScaleManager
        manager = FixedLossScaleManager(1024)
        """)
    result = _load().survey(root, provides=lambda name: True)
    assert (result["loss_scale_files"], result["model_dirs"]) == (0, 0)


def test_moxing_names_are_surveyed_and_resolved_in_the_shim(tmp_path):
    root = str(tmp_path / "zoo")
    _write(root, "TensorFlow/cv/Obs_ID0005_for_TensorFlow/train.py", """
        import moxing as mox
        from npu_bridge.npu_init import *
        mox.file.copy_parallel(src_url=data_url, dst_url="/cache/data")
        if not mox.file.exists("/cache/out"):
            mox.file.make_dirs("/cache/out")
        opt = NPULossScaleOptimizer(opt, FixedLossScaleManager(1024))
        """)
    _write(root, "TensorFlow/nlp/Mox_ID0006_for_TensorFlow/train.py", """
        import moxing.tensorflow as mox
        from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager
        mox.run(input_fn, model_fn, FixedLossScaleManager(8))
        """)
    result = _load().survey(root)
    names = {e["name"]: (e["dirs"], e["provided"]) for e in result["names"]}
    assert names["moxing.file.copy_parallel"] == (1, True)
    assert names["moxing.file.exists"] == (1, True)
    assert names["moxing.file.make_dirs"] == (1, True)
    assert names["moxing.tensorflow.run"] == (1, False)
    assert result["covered_dirs"] == 1
