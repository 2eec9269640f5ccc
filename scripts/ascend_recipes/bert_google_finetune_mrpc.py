"""Bert_Google_finetune: BERT fine-tuning on MRPC (run_classifier.py), as its test/train_*_1p.sh
launches it, with a tiny MRPC folder, vocabulary and BERT config.

The script's loss scaling is opt-in (``--npu_bert_loss_scale`` defaults to -1, "disabled"); a
user who wants it passes ``--npu_bert_loss_scale=0`` (dynamic, ExponentialUpdateLossScaleManager).
"""
import os

from ascend_recipes import bert_vocab, tiny_bert_config, write_text

MODEL_DIR = "TensorFlow/built-in/nlp/Bert_Google_finetune_for_TensorFlow"

SENTENCES = ["the movie is good", "the film is bad", "it is a good film", "a bad movie",
             "the good and the bad", "it is the film of the movie"]


def mrpc_folder(folder, rows=4):
    """train.tsv and dev.tsv as GLUE's MRPC ships them: a header, then
    ``Quality  #1 ID  #2 ID  #1 String  #2 String``."""
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for name in ("train.tsv", "dev.tsv"):
        lines = ["%d\t%d\t%d\t%s\t%s\n" % (i % 2, 100 + i, 200 + i, SENTENCES[i % len(SENTENCES)],
                                           SENTENCES[(i + 1) % len(SENTENCES)])
                 for i in range(rows)]
        write_text(os.path.join(folder, name), header + "".join(lines))
    return folder


def prepare(ctx):
    data = mrpc_folder(os.path.join(ctx.work, "MRPC"))
    vocab = bert_vocab(ctx.path("model", "vocab.txt"))
    with open(vocab, encoding="utf-8") as handle:
        vocab_size = len(handle.read().split())
    config = tiny_bert_config(ctx.path("model", "bert_config.json"), vocab_size)
    args = ["--task_name=MRPC", "--do_train=True", "--do_eval=True", "--data_dir=" + data,
            "--vocab_file=" + vocab, "--bert_config_file=" + config, "--max_seq_length=16",
            "--train_batch_size=2", "--eval_batch_size=2", "--learning_rate=2e-5",
            "--num_train_epochs=1", "--iterations_per_loop=1", "--save_checkpoints_steps=2",
            "--npu_bert_loss_scale=0", "--output_dir=" + ctx.out]
    return args, {}
