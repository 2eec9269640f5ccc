"""bert-squad (TF2 model garden, ``official/nlp/bert/run_squad.py``): SQuAD v1.1 fine-tuning.

The recipe writes what the launchers read (``test/train_performance_1p.sh``): the SQuAD
training TFRecords (``input_ids``, ``input_mask``, ``segment_ids``, ``start_positions``,
``end_positions``, sequences of 16), their ``squad_v1.1_meta_data`` JSON, a vocabulary and a tiny
BERT config, and gives the launcher's arguments (``--optimizer_type=lamb``,
``--distribution_strategy=one_device``, ``--num_gpus=1``, ``--steps_per_loop=1``) made small:
``--mode=train`` (no prediction file), 2 steps of batch 2, no initial checkpoint. As the
launcher does, it puts the model's root on ``PYTHONPATH``; the script runs from the recipe's
work folder.

It trains its 2 steps and exits cleanly, but never through ``NpuLossScaleOptimizer``: in
``official/modeling/performance.py`` the ``configure_optimizer`` that wraps the optimizer in
npu_device's ``NpuLossScaleOptimizer`` sits inside a string literal; the one in effect wraps it
in Keras's own ``LossScaleOptimizer``, and only with ``--dtype=fp16``, which no launcher passes.
(Its ``npu_device.distribute.all_reduce(grads, "mean")`` gets ``None`` for the pooler, which the
SQuAD head leaves without gradients; the emulated all-reduce passes ``None`` through.)
"""
import json
import os
import random

from ascend_recipes import bert_vocab, tf_example, tiny_bert_config, write_text, write_tfrecord

MODEL_DIR = "TensorFlow2/built-in/nlp/bert-squad_ID1566_for_TensorFlow2.X"
ENTRY = "official/nlp/bert/run_squad.py"
TF1 = False
CWD = "work"

SEQ = 16


def prepare(ctx):
    vocab = bert_vocab(ctx.path("model", "vocab.txt"))
    with open(vocab, encoding="utf-8") as handle:
        vocab_size = len(handle.read().split())
    config = tiny_bert_config(ctx.path("model", "bert_config.json"), vocab_size)
    rng = random.Random(0)
    records = []
    for _ in range(8):
        used = rng.randrange(SEQ // 2, SEQ + 1)
        ids = [12] + [rng.randrange(20, vocab_size) for _ in range(used - 2)] + [13]
        start = rng.randrange(1, used - 1)
        records.append(tf_example({
            "input_ids": ids + [0] * (SEQ - used), "input_mask": [1] * used + [0] * (SEQ - used),
            "segment_ids": [0] * SEQ, "start_positions": [start],
            "end_positions": [min(start + 1, used - 2)]}))
    train = write_tfrecord(ctx.path("squad", "squad_v1.1_train.tf_record"), records)
    meta = write_text(ctx.path("squad", "squad_v1.1_meta_data"), json.dumps({
        "task_type": "bert_squad", "train_data_size": len(records), "max_seq_length": SEQ,
        "max_query_length": 8, "doc_stride": 8, "version_2_with_negative": False}))
    args = ["--mode=train", "--input_meta_data_path=" + meta, "--train_data_path=" + train,
            "--vocab_file=" + vocab, "--bert_config_file=" + config, "--train_batch_size=2",
            "--optimizer_type=lamb", "--learning_rate=1e-4", "--num_train_epochs=1",
            "--model_dir=" + os.path.join(ctx.out, "ckpt"), "--log_steps=1",
            "--steps_per_loop=1", "--train_steps=2", "--num_gpus=1",
            "--distribution_strategy=one_device", "--sub_model_export_name=sub_model"]
    return args, {"PYTHONPATH": ctx.model_dir}
