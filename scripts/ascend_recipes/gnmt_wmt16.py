"""GNMT_ID1819: GNMT v2 on WMT16 en-de (nmt.py), as test/train_performance_1p.sh launches it
(train mode, DynamicRNN and fused LSTM, dynamic loss scale ``--npu_loss_scale=1``), on a tiny
BPE-tokenised parallel corpus and its vocabularies, with a narrow network (16 units).

GNMT's 4 layers are kept: with 2 (one unidirectional encoder layer) gnmt_model.py wraps the
encoder state, already a tuple, in one tuple more (``(encoder_state,) if num_uni_layers == 1``)
and the decoder's LSTM fails on it (ValueError: not enough values to unpack)."""
import os

from ascend_recipes import write_text

MODEL_DIR = "TensorFlow/built-in/nlp/GNMT_ID1819_for_TensorFlow"

WORDS = {"en": "the a house is small big cat dog sees runs@@ ning".split(),
         "de": "das ein haus ist klein gross katze hund sieht läuft@@ en".split()}


def prepare(ctx):
    data = os.path.join(ctx.work, "wmt16_de_en")
    for lang, words in WORDS.items():
        # nmt's vocabularies start with <unk>, <s>, </s>
        write_text(os.path.join(data, "vocab.bpe.32000." + lang),
                   "\n".join(["<unk>", "<s>", "</s>"] + words) + "\n")
        lines = [" ".join(words[(i + j) % len(words)] for j in range(3 + i % 4))
                 for i in range(8)]
        for prefix in ("train.tok.clean.bpe.32000", "newstest2014.tok.bpe.32000"):
            write_text(os.path.join(data, prefix + "." + lang), "\n".join(lines) + "\n")
    args = ["--mode=train", "--data_dir=" + data, "--debug_num_train_steps=2",
            "--max_train_epochs=1", "--output_dir=" + ctx.out, "--learning_rate=0.0005",
            "--batch_size=2", "--num_units=16", "--num_layers=4", "--num_buckets=1",
            "--src_max_len=8", "--tgt_max_len=8", "--use_DynamicRNN=True",
            "--use_fused_lstm=True", "--use_fused_lstm_dec=False", "--npu_loss_scale=1",
            "--precision_mode=allow_mix_precision"]
    return args, {}
