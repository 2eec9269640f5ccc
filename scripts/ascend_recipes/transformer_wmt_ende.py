"""Transformer (TF2 model garden, ``transformer_main.py``): Keras ``fit`` through
``npu_device``'s ``NpuLossScaleOptimizer`` on WMT en-de as ``data_download.py`` prepares it.

The script reads ``<data_dir>/*train*`` (and ``*dev*``) TFRecords of ``inputs``/``targets``
(int64 subtoken ids ending in ``<EOS>``, id 1), and is handed the subtoken vocabulary
``vocab.ende.32768`` (one quoted subtoken per line, ``<pad>`` and ``<EOS>`` first). The recipe
writes ``wmt32k-train-00001-of-00001`` (32 pairs), ``wmt32k-dev-00001-of-00001`` (8 pairs) and a
small vocabulary in those formats, and gives the arguments of the model's fp32 launcher
(``test/train_performance_1p_static.sh``: ``--dtype=fp32``, ``--distribution_strategy=mirrored``,
``--num_gpus=1``, ``--static_batch=true``; ``precision_mode`` stays the script's default,
``allow_mix_precision``, so the device computes the matmuls in float16 under a fixed loss scale
of 1) made small: the ``tiny`` parameter set, batches of 64 tokens (4 sentences of 16), 2 steps,
no BLEU evaluation. As that launcher does, it puts the model's ``transformer`` folder on
``PYTHONPATH``; the script runs from the recipe's work folder.

What the run meets after its steps, on TensorFlow 2.15: the script logs
``opt.inner_optimizer.learning_rate(step)``, a call of TF 2.4's learning-rate schedule, where
Keras's optimizers (2.11 and later) hold the rate in a variable (``TypeError: ... object is not
callable``). With ``--dtype=fp16`` (the other launchers) the model is not built on TF 2.15: its
metric layer subtracts a float32 constant from float16 cross-entropies (the same under
``force_fp32``, so not the emulation's doing).

Third-party versions it needs: absl-py < 2 (its ``_performance.py`` passes a string as an
enum's values, which absl-py 2.0 rejects), gin-config.
"""
import os
import random

from ascend_recipes import tf_example, write_text, write_tfrecord

MODEL_DIR = "TensorFlow2/built-in/nlp/Transformer_ID0633_for_TensorFlow2.X"
ENTRY = "transformer/official/nlp/transformer/transformer_main.py"
TF1 = False
CWD = "work"

_WORDS = ("the a of and to in is it on that was for with as his der die und zu den das ist "
          "nicht von mit sich des auf").split()


def write_wmt(data, train=32, dev=8, seed=0):
    """Subtoken vocabulary and ``wmt32k`` train/dev TFRecords in ``data``; returns the vocab."""
    subtokens = ["<pad>", "<EOS>"] + [w + "_" for w in _WORDS] + list("abcdefghijklmnopqrstuvwxyz")
    vocab = write_text(os.path.join(data, "vocab.ende.32768"),
                       "".join("'%s'\n" % s for s in subtokens))
    rng = random.Random(seed)

    def sentence():
        return [rng.randrange(2, len(subtokens)) for _ in range(rng.randrange(3, 12))] + [1]

    for tag, count in (("train", train), ("dev", dev)):
        write_tfrecord(os.path.join(data, "wmt32k-%s-00001-of-00001" % tag),
                       [tf_example({"inputs": sentence(), "targets": sentence()})
                        for _ in range(count)])
    return vocab


def prepare(ctx):
    data = os.path.join(ctx.work, "data")
    vocab = write_wmt(data)
    args = ["--data_dir=" + data, "--model_dir=" + os.path.join(ctx.out, "ckpt"),
            "--vocab_file=" + vocab, "--param_set=tiny", "--train_steps=2",
            "--steps_between_evals=2", "--static_batch=true", "--batch_size=64",
            "--max_length=16", "--num_gpus=1", "--dtype=fp32",
            "--distribution_strategy=mirrored", "--enable_metrics_in_training=true",
            "--enable_time_history=true"]
    return args, {"PYTHONPATH": os.path.join(ctx.model_dir, "transformer")}
