"""BertBase_Google_ID0631: BERT-Base pre-training (run_pretraining.py), the script the model's
own launchers (test/train_full_1p.sh, train_performance_1p.sh) run, with tiny pre-training
TFRecords (create_pretraining_data.py's features) and a tiny BERT config.

The generic rule picks run_classifier.py, which cannot run unmodified: its optimization.py reads
``FLAGS.npu_bert_loss_scale``, a flag only run_pretraining.py defines (AttributeError:
npu_bert_loss_scale), so the recipe names run_pretraining.py.
"""
import random

from ascend_recipes import bert_vocab, tf_example, tiny_bert_config, write_tfrecord

MODEL_DIR = "TensorFlow/built-in/nlp/BertBase_Google_ID0631_for_TensorFlow"
ENTRY = "run_pretraining.py"

SEQ, PREDICTIONS = 16, 4


def pretraining_records(count, vocab_size, seed=0):
    """Serialized examples as create_pretraining_data.py writes them: [CLS] a [SEP] b [SEP],
    some positions masked, a next-sentence label."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        used = rng.randrange(SEQ // 2, SEQ + 1)
        ids = [12] + [rng.randrange(20, vocab_size) for _ in range(used - 2)] + [13]
        ids[used // 2] = 13
        segment = [0] * (used // 2 + 1) + [1] * (used - used // 2 - 1)
        positions = sorted(rng.sample(range(1, used - 1), PREDICTIONS - 1)) + [0]
        masked = [ids[p] for p in positions[:-1]] + [0]
        for p in positions[:-1]:
            ids[p] = 14  # [MASK]
        pad = SEQ - used
        records.append(tf_example({
            "input_ids": ids + [0] * pad, "input_mask": [1] * used + [0] * pad,
            "segment_ids": segment + [0] * pad, "masked_lm_positions": positions,
            "masked_lm_ids": masked, "masked_lm_weights": [1.0] * (PREDICTIONS - 1) + [0.0],
            "next_sentence_labels": [i % 2]}))
    return records


def write_pretraining_data(ctx, shards=2, per_shard=4):
    vocab = bert_vocab(ctx.path("model", "vocab.txt"))
    with open(vocab, encoding="utf-8") as handle:
        vocab_size = len(handle.read().split())
    config = tiny_bert_config(ctx.path("model", "bert_config.json"), vocab_size)
    for shard in range(shards):
        write_tfrecord(ctx.path("data", "part-%05d.tfrecord" % shard),
                       pretraining_records(per_shard, vocab_size, seed=shard))
    return ctx.path("data", "part-") + "*", config


def prepare(ctx):
    pattern, config = write_pretraining_data(ctx)
    args = ["--input_file=" + pattern, "--output_dir=" + ctx.out, "--do_train=True",
            "--do_eval=False", "--bert_config_file=" + config, "--train_batch_size=2",
            "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDICTIONS,
            "--num_train_steps=2", "--num_warmup_steps=1", "--learning_rate=1e-4",
            "--save_checkpoints_steps=2", "--iterations_per_loop=1"]
    return args, {}
