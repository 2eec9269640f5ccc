"""Transformer_ID0004: the noahnmt Transformer (en-de), trained by ``noahnmt.bin.train`` as the
model's launchers (test/train_*_1p.sh, train-ende.sh) run it, on tiny concatenated-sentence
TFRecords in the format create_training_data_concat.py writes, with a tiny model config.

The generic rule picks noahnmt/bin/train_horovod.py, ModelArts' variant: it trains through
``moxing.tensorflow`` (``mox.run``, ``mox.ModelSpec``, ``mox.get_optimizer_fn``,
``ops_adapter.rank/size``...), Huawei's non-public training framework, and uses contrib's
LossScaleOptimizer rather than NPULossScaleOptimizer. The launchers run noahnmt/bin/train.py
(``python3 -m noahnmt.bin.train`` from the model folder), so the recipe names it and puts the
model folder on PYTHONPATH as ``-m`` does. The launchers' ``--config_paths=./configs/
transformer_big.yml`` is not in the model folder; the recipe writes a small config of its own
(the model class and a 1-layer, 16-unit Transformer).

train.py parses its YAML flags with ``yaml.load(text)`` (no Loader), which needs PyYAML < 6.
"""
import os
import random

from ascend_recipes import tf_example, write_text, write_tfrecord

MODEL_DIR = "TensorFlow/built-in/nlp/Transformer_ID0004_for_TensorFlow"
ENTRY = "noahnmt/bin/train.py"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LENGTH, VOCAB = 16, 32
CONFIG = """model_name: seq2seq_model
model_params:
  embedding.dim: 16
  encoder.class: transformer_encoder
  encoder.params:
    num_layers: 1
    num_units: 16
    ffn.num_units: 32
    attention.num_heads: 2
  decoder.class: transformer_decoder
  decoder.params:
    num_layers: 1
    num_units: 16
    ffn.num_units: 32
    attention.num_heads: 2
"""


def concat_records(count, seed=0):
    """Examples as create_training_data_concat.py writes them: for source+</s>, <s>+target and
    target+</s>, the ids, mask, segment ids and positions, padded to LENGTH."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        size = rng.randrange(3, LENGTH - 1)
        source = [rng.randrange(3, VOCAB) for _ in range(size)]
        target = [rng.randrange(3, VOCAB) for _ in range(size)]
        features = {}
        for name, ids in (("source_eos", source + [2]), ("target_sos", [1] + target),
                          ("target_eos", target + [2])):
            pad = [0] * (LENGTH - len(ids))
            features[name + "_ids"] = ids + pad
            features[name + "_mask"] = [1] * len(ids) + pad
            features[name + "_segids"] = [1] * len(ids) + pad
            features[name + "_posids"] = list(range(len(ids))) + pad
        records.append(tf_example(features))
    return records


def prepare(ctx):
    train = write_tfrecord(ctx.path("concat16", "train.l16.tfrecord-001-of-001"),
                           concat_records(8))
    vocab = write_text(ctx.path("vocab.share"), "\n".join(
        ["<unk>", "<s>", "</s>"] + ["w%d" % i for i in range(VOCAB - 3)]) + "\n")
    config = write_text(ctx.path("configs", "transformer_tiny.yml"), CONFIG)
    args = ["--config_paths=" + config,
            "--model_params=max_grad_norm: 5\noptimizer.name: Adam\ndisable_vocab_table: true\n"
            "learning_rate.warmup_steps: 16000\nmixed_precision.params:\n"
            "  init_loss_scale: 1024.0\n  fix_loss_scale: false\n"
            "vocab_source: %s\nvocab_target: %s\n" % (vocab, vocab),
            "--metrics=- class: perplexity\n",
            "--input_pipeline_train=class: parallel_tfrecord_input_pipeline_concat\nparams:\n"
            "  fix_batch: true\n  max_length: %d\n  files: %s\n" % (LENGTH, train),
            "--input_pipeline_dev=class: parallel_tfrecord_input_pipeline_concat\nparams:\n"
            "  max_length: %d\n  files: %s\n" % (LENGTH, train),
            "--train_steps=2", "--schedule=train", "--eval_run_autoregressive=False",
            "--batch_size=2", "--data_parallelism=False", "--dp_param_shard=False",
            "--enable_graph_rewriter=False", "--model_dir=" + ctx.out, "--use_fp16=True"]
    path = [ctx.model_dir, REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    return args, {"PYTHONPATH": os.pathsep.join(path)}
