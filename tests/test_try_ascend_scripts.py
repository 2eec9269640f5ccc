"""scripts/try_ascend_scripts.py and the step report of `python -m npu_loss_scale.emulate
--report`, on Ascend-shaped scripts written here; TF1 mode's tensorflow.contrib module paths."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale.detection import backends as detection
from npu_loss_scale.device import register as emulation

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TRY = os.path.join(REPO, "scripts", "try_ascend_scripts.py")
CONTRIB_SCRIPT = os.path.join(HERE, "scripts", "tf1_contrib_paths", "train.py")
STAND_IN_TF_SLIM = os.path.join(HERE, "stand_in_tf_slim")


def _env(extra_path=()):
    env = dict(os.environ)
    env.pop(detection.ENV_VAR, None)
    env.pop(emulation.MODE_ENV_VAR, None)
    env.pop("RANK_SIZE", None)
    env.pop("NPU_LOSS_SCALE_EMULATE_REPORT", None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["PYTHONPATH"] = os.pathsep.join(list(extra_path) + [REPO])
    return env


def _write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(textwrap.dedent(text))
    return full


def test_tf1_contrib_module_paths_resolve_and_the_report_counts_applied_and_skipped_steps(
        tmp_path):
    """The third feed makes w * x overflow float32 once scaled by 2**20: that step is skipped
    (w kept), the two others apply (w -= 0.5 * x); the report counts exactly that."""
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "npu_loss_scale.emulate", "--report", str(report), "--tf1",
         CONTRIB_SCRIPT, "--hparams=feeds=[1.0,2.0,1e34]"],
        env=_env([STAND_IN_TF_SLIM]), cwd=str(tmp_path), capture_output=True, text=True,
        timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(l) for l in result.stdout.splitlines() if l.startswith("{")]
    try:
        v1_cells = hasattr(tf.compat.v1.nn.rnn_cell, "LSTMStateTuple")
    except ImportError:  # TF 2.21: Keras 3 has none
        v1_cells = False
    state_tuple = True if v1_cells else \
        "tf.contrib.rnn.LSTMStateTuple is not mapped to TensorFlow 2 by the TF1 mode of " \
        "npu_loss_scale.emulate"
    assert lines[0] == {"slim": "tf_slim", "nets": "tf_slim.nets.resnet_v1",
                        "utils": "tf_slim.layers.utils", "add_arg_scope": "tf_slim.ops.arg_scope",
                        "tensorflow_core_is_tf": True, "state_tuple": state_tuple,
                        "hparams": {"learning_rate": 0.5, "feeds": [1.0, 2.0, 1e34]}}
    assert [l["w"] for l in lines[1:]] == [0.5, -0.5, -0.5]
    assert json.loads(report.read_text()) == {"optimizers_built": 1, "train_ops_built": 1,
                                              "steps_applied": 2, "steps_skipped": 1}


def _load_try():
    spec = importlib.util.spec_from_file_location("try_ascend_scripts", TRY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_entry_scripts_and_generic_arguments_are_chosen_from_the_scripts_own_definitions(
        tmp_path):
    root = str(tmp_path / "zoo")
    model = os.path.join(root, "TensorFlow", "cv", "Net_ID0001_for_TensorFlow")
    _write(root, "TensorFlow/cv/Net_ID0001_for_TensorFlow/modelzoo_level.txt", "x\n")
    _write(root, "TensorFlow/cv/Net_ID0001_for_TensorFlow/optim.py", """
        from npu_bridge.npu_init import *
        def make(opt):
            return NPULossScaleOptimizer(opt, FixedLossScaleManager(1024))
        """)
    _write(root, "TensorFlow/cv/Net_ID0001_for_TensorFlow/export_model.py", """
        import optim
        if __name__ == "__main__":
            pass
        """)
    train = _write(root, "TensorFlow/cv/Net_ID0001_for_TensorFlow/train_net.py", """
        import tensorflow as tf
        import optim
        tf.app.flags.DEFINE_string("data_dir", None, "")
        tf.app.flags.DEFINE_integer(name="max_steps", default=100, help="")
        tf.app.flags.DEFINE_string("task_name", None, "")
        if __name__ == "__main__":
            tf.app.run()
        """)
    _write(root, "TensorFlow/cv/Net_ID0001_for_TensorFlow/configs/args.py", "")
    _write(root, "TensorFlow/cv/Net_ID0001_for_TensorFlow/flags_def.py", """
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--batch-size", type=int)
        p.add_argument("--epochs", type=int)
        p.add_argument("--use_fp16", action="store_true")
        """)
    tool = _write(root, "TensorFlow/cv/Tool_ID0002_for_TensorFlow/run_tool.py", """
        from npu_bridge.npu_init import *
        m = ExponentialUpdateLossScaleManager(2 ** 32, 1000)
        if __name__ == "__main__":
            pass
        """)
    _write(root, "TensorFlow/cv/Tool_ID0002_for_TensorFlow/README.md", "x\n")
    _write(root, "TensorFlow/cv/NoEntry_ID0003_for_TensorFlow/model.py", """
        from npu_bridge.npu_init import *
        m = FixedLossScaleManager(1)
        """)
    mod = _load_try()
    entries = mod.loss_scale_entries(root)
    assert entries == {model: train,
                       os.path.dirname(tool): tool,
                       os.path.join(root, "TensorFlow/cv/NoEntry_ID0003_for_TensorFlow"): None}
    assert mod.generic_arguments(train, "/d", "/o") == [
        "--batch-size=2", "--data_dir=/d", "--epochs=1", "--max_steps=2"]
    assert mod.first_barrier("x\nTraceback (most recent call last):\n  File \"a\", line 1\n"
                             "    import foo\nModuleNotFoundError: No module named 'foo'\n", 1) \
        == "ModuleNotFoundError: No module named 'foo'"
    fetch = ("Exception: URL fetch failure on https://example.org/w_notop.h5: None -- [Errno -2] "
             "Name or service not known")
    barrier = mod.first_barrier(
        "Traceback (most recent call last):\n  File \"a\", line 1\nurllib.error.URLError: "
        "<urlopen error [Errno -2]>\n\nDuring handling of the above exception, another "
        "exception occurred:\n\nTraceback (most recent call last):\n  File \"b\", line 2\n"
        + fetch + "\n", 1)
    assert barrier == fetch
    assert mod.barrier_category({"outcome": "failed", "barrier": barrier}) == "data or arguments"
    data = mod.make_synthetic_data(str(tmp_path / "data"), records=3)
    import gzip  # pylint: disable=import-outside-toplevel
    with gzip.open(os.path.join(data, "train-images-idx3-ubyte.gz")) as handle:
        header = handle.read(16)
    assert header == b"\x00\x00\x08\x03\x00\x00\x00\x03\x00\x00\x00\x1c\x00\x00\x00\x1c"
    assert os.path.getsize(os.path.join(data, "cifar-10-batches-bin", "test_batch.bin")) \
        == 3 * 3073


@pytest.mark.slow
def test_try_script_runs_a_sample_and_counts_only_evidence_of_loss_scaled_steps(tmp_path):
    """Three model directories: one trains through NPULossScaleOptimizer, one builds it but
    fails on an import before any step, one trains with a plain optimizer (not counted)."""
    root = str(tmp_path / "zoo")
    _write(root, "A_ID0001_for_TensorFlow/train.py", """
        import tensorflow as tf
        from npu_bridge.npu_init import *
        tf.app.flags.DEFINE_integer("train_steps", 100, "")
        FLAGS = tf.app.flags.FLAGS
        def main(_):
            w = tf.get_variable("w", [], initializer=tf.ones_initializer())
            opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.1),
                                        FixedLossScaleManager(8))
            op = opt.minimize(w * w)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                for _ in range(FLAGS.train_steps):
                    sess.run(op)
        if __name__ == "__main__":
            tf.app.run()
        """)
    _write(root, "B_ID0002_for_TensorFlow/train.py", """
        import tensorflow as tf
        from npu_bridge.npu_init import *
        opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.1),
                                    FixedLossScaleManager(8))
        import a_module_nobody_has
        if __name__ == "__main__":
            pass
        """)
    _write(root, "C_ID0003_for_TensorFlow/train.py", """
        import tensorflow as tf
        from npu_bridge.npu_init import *
        m = FixedLossScaleManager(8)  # built, never used
        w = tf.get_variable("w", [], initializer=tf.ones_initializer())
        op = tf.train.GradientDescentOptimizer(0.1).minimize(w * w)
        if __name__ == "__main__":
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                sess.run(op)
        """)
    results_file = str(tmp_path / "results.json")
    out = subprocess.run([sys.executable, TRY, root, "--sample", "3", "--seed", "1",
                          "--timeout", "240", "--python", sys.executable, "--json", results_file],
                         env=_env(), capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "loss-scale model directories: 3; with a training entry script: 3" in out.stdout
    with open(results_file, encoding="utf-8") as handle:
        results = {r["script"]: r for r in json.load(handle)}
    a, b, c = (results[d + "/train.py"] for d in ("A_ID0001_for_TensorFlow",
                                                   "B_ID0002_for_TensorFlow",
                                                   "C_ID0003_for_TensorFlow"))
    assert (a["outcome"], a["barrier"], a["args"]) == ("trained", "-", ["--train_steps=2"])
    assert a["report"] == {"optimizers_built": 1, "train_ops_built": 1, "steps_applied": 2,
                           "steps_skipped": 0}
    assert (b["outcome"], b["barrier"]) == (
        "failed", "ModuleNotFoundError: No module named 'a_module_nobody_has'")
    assert (c["outcome"], c["report"]) == ("no-loss-scale-step", {})
    assert "first barriers of the others: other 1, third-party module missing 1\n" \
        "trained through NPULossScaleOptimizer (>= 1 step): 1 of 3 (1 with a clean exit)" \
        in out.stdout


def test_compare_plain_runs_each_script_plain_and_emulated(tmp_path):
    """The config's allow_mix_precision rounds the backward matmul's incoming gradient, 2**17
    and then 2**16 (both beyond float16's 65504): the emulated run skips both steps; the plain
    run applies both in float32. Pairs and summary as the command prints and writes them."""
    root = str(tmp_path / "zoo")
    _write(root, "Mix_ID0001_for_TensorFlow/train.py", """
        import tensorflow as tf
        from npu_bridge.npu_init import *
        tf.app.flags.DEFINE_integer("train_steps", 100, "")
        FLAGS = tf.app.flags.FLAGS
        def main(_):
            x = tf.constant([[1.0, 2.0]])
            w = tf.get_variable("w", [2, 1], initializer=tf.ones_initializer())
            mgr = ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 17,
                                                    incr_every_n_steps=1000,
                                                    decr_every_n_nan_or_inf=1, decr_ratio=0.5)
            opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.1), mgr)
            op = opt.minimize(tf.reduce_sum(tf.matmul(x, w)))
            config = tf.ConfigProto()
            custom = config.graph_options.rewrite_options.custom_optimizers.add()
            custom.name = "NpuOptimizer"
            custom.parameter_map["precision_mode"].s = tf.compat.as_bytes("allow_mix_precision")
            with tf.Session(config=config) as sess:
                sess.run(tf.global_variables_initializer())
                for _ in range(FLAGS.train_steps):
                    sess.run(op)
        if __name__ == "__main__":
            tf.app.run()
        """)
    results_file = str(tmp_path / "pairs.json")
    out = subprocess.run([sys.executable, TRY, root, "--sample", "1", "--compare-plain",
                          "--timeout", "240", "--python", sys.executable, "--json", results_file],
                         env=_env(), capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(results_file, encoding="utf-8") as handle:
        (pair,) = json.load(handle)
    plain, emulated = pair["plain"], pair["emulated"]
    assert (plain["outcome"], plain["report"]["steps_applied"],
            plain["report"]["steps_skipped"]) == ("trained", 2, 0), plain["stderr_tail"]
    assert (emulated["outcome"], emulated["report"]["steps_applied"],
            emulated["report"]["steps_skipped"]) == ("trained", 0, 2), emulated["stderr_tail"]
    assert "--plain: no precision_mode is applied" in plain["stderr_tail"]
    assert "--plain" not in emulated["stderr_tail"]
    assert "trained plain: 1 of 1; of those, trained emulated too: 1\n" in out.stdout
    ratio = emulated["seconds"] / plain["seconds"]
    assert ("total wall time of the 1 trained in both that ended on their own: plain %.1f s, "
            "emulated %.1f s: %.2fx"
            % (plain["seconds"], emulated["seconds"], ratio)) in out.stdout


def test_the_comparison_summary_names_scripts_that_train_in_one_run_only():
    mod = _load_try()

    def run(script, outcome, seconds, barrier="-", steps=2):
        return {"script": script, "outcome": outcome, "seconds": seconds, "barrier": barrier,
                "report": {"steps_applied": steps, "steps_skipped": 0} if steps else {}}

    pairs = [{"plain": run("a.py", "trained", 10.0), "emulated": run("a.py", "trained", 12.0)},
             {"plain": run("b.py", "trained", 20.0), "emulated": run("b.py", "timeout", 60.0,
                                                                    "timeout after 60s")},
             {"plain": run("c.py", "failed", 1.0, "ImportError: x"),
              "emulated": run("c.py", "trained, then failed", 5.0, "KeyError: y")},
             {"plain": run("d.py", "trained, then failed", 30.0, "KeyError: z"),
              "emulated": run("d.py", "trained", 45.0)},
             {"plain": run("e.py", "trained, then timeout", 300.0, steps=40),
              "emulated": run("e.py", "trained, then timeout", 300.0, steps=30)}]
    assert mod.comparison_summary(pairs) == [
        "trained plain: 4 of 5; of those, trained emulated too: 3",
        "  trains plain only: b.py (emulated: timeout, timeout after 60s)",
        "  trains emulated only: c.py (plain: failed, ImportError: x)",
        "total wall time of the 2 trained in both that ended on their own: plain 40.0 s, "
        "emulated 57.0 s: 1.43x (per script 1.20x-1.50x, median 1.35x)",
        "total wall time of the 3 that ended on their own in both runs, whatever their outcome: "
        "plain 41.0 s, emulated 62.0 s: 1.51x",
        "  ran into the timeout (both): e.py: plain 40 steps in 300 s (trained, then timeout), "
        "emulated 30 steps in 300 s (trained, then timeout)"]


@pytest.mark.slow
def test_a_recipe_gives_a_script_its_arguments_and_data_and_is_counted_apart(tmp_path):
    """A script that needs a vocabulary file and a task name fails with the generic arguments
    and trains with the recipe that writes them; the summary counts the two apart."""
    root = str(tmp_path / "zoo")
    _write(root, "D_ID0004_for_TensorFlow/run_classifier.py", """
        import tensorflow as tf
        from npu_bridge.npu_init import *
        flags = tf.app.flags
        flags.DEFINE_string("vocab_file", None, "")
        flags.DEFINE_string("task_name", None, "")
        FLAGS = flags.FLAGS
        def main(_):
            words = open(FLAGS.vocab_file).read().split()
            assert FLAGS.task_name == "mrpc" and words[:2] == ["[PAD]", "[unused0]"], words
            w = tf.get_variable("w", [], initializer=tf.ones_initializer())
            opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.1),
                                        FixedLossScaleManager(8))
            op = opt.minimize(w * w * len(words))
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                sess.run(op)
        if __name__ == "__main__":
            tf.app.run()
        """)
    recipes = str(tmp_path / "recipes")
    _write(recipes, "d_recipe.py", """
        from ascend_recipes import bert_vocab
        MODEL_DIR = "D_ID0004_for_TensorFlow"
        def prepare(ctx):
            vocab = bert_vocab(ctx.path("vocab.txt"))
            return ctx.generic_args + ["--vocab_file=" + vocab, "--task_name=mrpc"], {}
        """)
    outs = {}
    for mode in (["--recipes", recipes], ["--no-recipes"]):
        results_file = str(tmp_path / "results.json")
        out = subprocess.run([sys.executable, TRY, root, "--sample", "1", "--timeout", "240",
                              "--json", results_file] + mode, env=_env(), capture_output=True,
                             text=True, timeout=600, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        with open(results_file, encoding="utf-8") as handle:
            outs[mode[0]] = (json.load(handle)[0], out.stdout)
    with_recipe, stdout = outs["--recipes"]
    assert with_recipe["recipe"] == "d_recipe.py" and with_recipe["outcome"] == "trained"
    assert with_recipe["report"]["steps_applied"] == 1
    assert "with a recipe: 1 of 1 trained; generic arguments only: 0 of 0 trained" in stdout
    generic, stdout = outs["--no-recipes"]
    assert generic["recipe"] is None and generic["outcome"] == "failed"
    assert "with a recipe: 0 of 0 trained; generic arguments only: 0 of 1 trained" in stdout



@pytest.mark.slow
def test_a_listed_script_gets_its_recipe_and_the_lines_extra_arguments_come_last(tmp_path):
    """--list FILE: the listed script's model directory has a recipe, which gives it its data
    and arguments; the line's own argument is appended after them (here it overrides one)."""
    root = str(tmp_path / "zoo")
    _write(root, "E_ID0005_for_TensorFlow2.X/modelzoo_level.txt", "x\n")
    _write(root, "E_ID0005_for_TensorFlow2.X/src/zoo_words.py", """
        def count(path):
            return len(open(path).read().split())
        """)
    _write(root, "E_ID0005_for_TensorFlow2.X/nets/train.py", """
        import argparse
        import sys
        import tensorflow as tf
        import npu_loss_scale
        import zoo_words
        from npu_bridge.npu_init import *
        p = argparse.ArgumentParser()
        p.add_argument("--words", required=True)
        p.add_argument("--steps", type=int, default=100)
        args = p.parse_args()
        n = zoo_words.count(args.words)
        print("package under test:", npu_loss_scale.__file__, file=sys.stderr)
        w = tf.get_variable("w", [], initializer=tf.ones_initializer())
        opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.1),
                                    FixedLossScaleManager(8))
        op = opt.minimize(w * w * n)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(args.steps):
                sess.run(op)
        """)
    recipes = str(tmp_path / "recipes")
    _write(recipes, "e_recipe.py", """
        import os
        from ascend_recipes import write_text
        MODEL_DIR = "E_ID0005_for_TensorFlow2.X"
        def prepare(ctx):
            words = write_text(ctx.path("words.txt"), "a b c\\n")
            return (["--words=" + words, "--steps=3"],
                    {"PYTHONPATH": os.path.join(ctx.model_dir, "src")})
        """)
    listing = _write(str(tmp_path), "list.txt", """
        # one script, one extra argument
        E_ID0005_for_TensorFlow2.X/nets/train.py --steps=2
        """)
    results_file = str(tmp_path / "results.json")
    out = subprocess.run([sys.executable, TRY, root, "--list", listing, "--recipes", recipes,
                          "--timeout", "240", "--json", results_file], env=_env(),
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "1 scripts from %s; with a recipe: 1" % listing in out.stdout
    with open(results_file, encoding="utf-8") as handle:
        result = json.load(handle)[0]
    assert result["recipe"] == "e_recipe.py" and result["outcome"] == "trained"
    assert result["args"][1:] == ["--steps=3", "--steps=2"]
    assert result["report"]["steps_applied"] == 2
    assert "package under test: %s\n" % os.path.join(REPO, "npu_loss_scale", "__init__.py") \
        in result["stderr_tail"]

def test_recipe_helpers_write_what_tensorflow_reads(tmp_path):
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    try:
        import ascend_recipes  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    example = ascend_recipes.tf_example({"ids": [3, 1, 4], "score": [0.5], "name": [b"x"]})
    ours = ascend_recipes.write_tfrecord(str(tmp_path / "ours.tfrecord"), [example, b"", example])
    theirs = str(tmp_path / "theirs.tfrecord")
    with tf.io.TFRecordWriter(theirs) as writer:
        for record in (example, b"", example):
            writer.write(record)
    with open(ours, "rb") as a, open(theirs, "rb") as b:
        assert a.read() == b.read()
    image = tf.io.decode_png(ascend_recipes.png_bytes(5, 7, 3, seed=1))
    assert image.shape == (5, 7, 3) and image.dtype == tf.uint8
    gray = tf.io.decode_png(ascend_recipes.png_bytes(4, 4, 1))
    assert gray.shape == (4, 4, 1)
    assert tf.io.decode_jpeg(ascend_recipes.jpeg_bytes(8, 6)).shape == (8, 6, 3)
    known = ascend_recipes.load_recipes()
    assert len(known) >= 10 and all(callable(m.prepare) for m in known.values())


def test_python_that_cannot_run_tensorflow_is_refused_by_name(tmp_path):
    missing = str(tmp_path / "no-such-python")
    out = subprocess.run([sys.executable, TRY, str(tmp_path), "--python", missing],
                         env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert "--python must be a Python interpreter; got %r" % missing in out.stderr


@pytest.mark.slow
def test_a_relative_python_runs_the_scripts_and_tf1_mode_only_on_tensorflow_2(tmp_path):
    """Scripts run from their own folders, so ``--python`` relative to the caller's folder must
    still find the interpreter; on TensorFlow 1.x the TF1 script runs without ``--tf1``."""
    root = str(tmp_path / "zoo")
    _write(root, "A_ID0001_for_TensorFlow/train.py", """
        import tensorflow as tf
        from npu_bridge.npu_init import *
        def main(_):
            w = tf.get_variable("w", [], initializer=tf.ones_initializer())
            opt = NPULossScaleOptimizer(tf.train.GradientDescentOptimizer(0.1),
                                        FixedLossScaleManager(8))
            op = opt.minimize(w * w)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                sess.run(op)
        if __name__ == "__main__":
            tf.app.run()
        """)
    caller = os.path.dirname(os.path.dirname(sys.executable))
    relative = os.path.relpath(sys.executable, caller)
    assert os.sep in relative and not os.path.isabs(relative)
    results_file = str(tmp_path / "results.json")
    out = subprocess.run([sys.executable, TRY, root, "--python", relative, "--json", results_file],
                         cwd=caller, env=_env(), capture_output=True, text=True, timeout=600,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    tf1 = tf.__version__.startswith("1.")
    assert ("TensorFlow %s (%s)%s\n" % (tf.__version__, os.path.abspath(
        os.path.join(caller, relative)), ": scripts run without --tf1" if tf1 else "")) in out.stdout
    with open(results_file, encoding="utf-8") as handle:
        (result,) = json.load(handle)
    assert (result["outcome"], result["tf1"]) == ("trained", not tf1)
    assert result["report"]["steps_applied"] == 1


def test_recipe_jpeg_helper_works_in_graph_mode_as_on_tensorflow_1():
    """TensorFlow 1.x runs the recipes in graph mode (no ``.numpy()``): the helper must give the
    JPEG of the seed's NumPy pixels there too."""
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    try:
        import ascend_recipes  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    with tf.Graph().as_default():
        assert not tf.executing_eagerly()
        encoded = ascend_recipes.jpeg_bytes(8, 16, seed=3)
    pixels = np.random.RandomState(3).randint(0, 256, (8, 16, 3)).astype(np.uint8)
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        want = session.run(tf.io.encode_jpeg(pixels))
        assert session.run(tf.shape(tf.io.decode_jpeg(encoded))).tolist() == [8, 16, 3]
    assert isinstance(encoded, bytes) and encoded[:3] == b"\xff\xd8\xff" and encoded == want


def test_a_recipes_timeout_is_a_floor_that_a_longer_command_line_timeout_raises():
    """A recipe's ``TIMEOUT`` gives its script at least that long; ``--timeout`` gives more on a
    busy machine (it used to be overridden by the recipe's, so a rerun could not give more)."""
    mod = _load_try()

    class Recipe:  # pylint: disable=too-few-public-methods
        TIMEOUT = 600

    assert mod.script_timeout(1800.0, Recipe) == 1800.0
    assert mod.script_timeout(300.0, Recipe) == 600
    assert mod.script_timeout(300.0, object()) == 300.0     # a recipe without TIMEOUT
    assert mod.script_timeout(300.0) == 300.0               # no recipe


def test_a_recipes_fixed_path_shows_its_folder_in_the_runs_own_mount_namespace(tmp_path):
    """FIXED_PATHS: a script reading a path written into its code sees the recipe's folder there,
    in its own mount namespace only; nothing appears at that path outside the run. Where the
    namespace cannot be made (not root), the refusal says what is needed."""
    mod = _load_try()
    source = tmp_path / "recipe" / "celebA"
    source.mkdir(parents=True)
    (source / "000001.jpg").write_text("face")
    covered = tmp_path / "home"             # exists, empty: stands for /home
    covered.mkdir()
    fixed = str(covered / "disk" / "celebA")
    cmd = ["sh", "-c", 'ls "$1" && cat "$1/000001.jpg"', "sh", fixed]
    if os.name != "posix" or os.geteuid() != 0:
        with pytest.raises(RuntimeError, match="root on Linux with unshare"):
            mod.in_mount_namespace(cmd, {fixed: str(source)})
        return
    out = subprocess.run(mod.in_mount_namespace(cmd, {fixed: str(source)}), capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["000001.jpg", "face"]
    assert os.listdir(str(covered)) == []   # outside the run: still empty
    with pytest.raises(ValueError, match="holds a recipe folder"):
        mod.in_mount_namespace(cmd, {str(tmp_path / "elsewhere" / "data"): str(source)})
    with pytest.raises(ValueError, match="absolute paths"):
        mod.in_mount_namespace(cmd, {"relative/data": str(source)})


def test_a_model_copy_takes_the_builds_and_outputs_and_the_script_keeps_its_graph_mode(tmp_path):
    """MODEL_COPY: a recipe runs the model's own build step in a copy of the model directory
    (``ctx.run_python``, the script's interpreter); the script, run at its corpus path, imports
    what was built, reads a file relative to its folder and writes under its own root, all in the
    copy; the corpus is left as it was. The recipe imports TensorFlow to write its data, which
    sets TF2_BEHAVIOR=1 in the runner: the script must not inherit it (on TensorFlow 1.15 it
    turns graph mode into eager execution)."""
    root = str(tmp_path / "zoo")
    model = os.path.join(root, "E_ID0005_for_TensorFlow")
    _write(root, "E_ID0005_for_TensorFlow/src/train.py", """
        import os
        import tensorflow as tf
        from npu_bridge.npu_init import *
        import built                                  # what the build step wrote
        def main():
            here = os.path.dirname(os.path.abspath(__file__))
            setting = open("setting.txt").read().strip()  # relative to the folder it runs from
            with open(os.path.join(here, "..", "outputs.txt"), "w") as out:
                inherited = [v for v in open("/proc/self/environ").read().split("\\0")
                             if v.startswith("TF2_BEHAVIOR=")]  # as exec'd, not as TF set it
                out.write("%s %s %s" % (built.VALUE, setting, inherited))
            tf.compat.v1.disable_eager_execution()
            w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.ones_initializer())
            opt = NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                        FixedLossScaleManager(8))
            op = opt.minimize(w * w)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(op)
        if __name__ == "__main__":
            main()
        """)
    _write(root, "E_ID0005_for_TensorFlow/src/setting.txt", "as shipped\n")
    before = sorted(os.path.relpath(os.path.join(d, f), model)
                    for d, _, files in os.walk(model) for f in files)
    recipes = str(tmp_path / "recipes")
    _write(recipes, "e_recipe.py", """
        import os
        MODEL_DIR = "E_ID0005_for_TensorFlow"
        ENTRY = "src/train.py"
        MODEL_COPY = True
        def prepare(ctx):
            import tensorflow  # as recipes writing JPEG or TFRecord data do
            assert os.environ.get("TF2_BEHAVIOR") == "1"
            ctx.run_python(["-c", "open('built.py', 'w').write('VALUE = 42')"],
                           os.path.join(ctx.model_copy, "src"))
            return [], {}
        """)
    results_file = str(tmp_path / "results.json")
    env = _env()
    env.pop("TF2_BEHAVIOR", None)   # this test's own TensorFlow set it
    out = subprocess.run([sys.executable, TRY, root, "--sample", "1", "--timeout", "240",
                          "--recipes", recipes, "--keep", str(tmp_path / "runs"),
                          "--json", results_file], env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(results_file, encoding="utf-8") as handle:
        results = json.load(handle)
    assert len(results) == 1, out.stdout
    result = results[0]
    after = sorted(os.path.relpath(os.path.join(d, f), model)
                   for d, _, files in os.walk(model) for f in files)
    assert after == before                            # nothing written into the corpus
    if os.name != "posix" or os.geteuid() != 0:
        assert result["outcome"] == "failed" and "root on Linux with unshare" in result["barrier"]
        return
    assert (result["outcome"], result["barrier"]) == ("trained", "-"), result["stderr_tail"]
    copy = os.path.join(str(tmp_path / "runs"), "00", "recipe", "model")
    with open(os.path.join(copy, "outputs.txt"), encoding="utf-8") as handle:
        assert handle.read() == "42 as shipped []"
