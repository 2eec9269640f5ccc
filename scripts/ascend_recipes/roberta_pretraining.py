"""Roberta_ID2349: RoBERTa (Chinese, whole-word masking) pre-training with run_pretraining.py,
as test/train_performance_1p.sh launches it, on tiny pre-training TFRecords (the features
create_pretraining_data.py writes, BERT's format) and a tiny BERT config."""
from ascend_recipes.bertbase_google_pretraining import PREDICTIONS, SEQ, write_pretraining_data

MODEL_DIR = "TensorFlow/built-in/nlp/Roberta_ID2349_for_TensorFlow"


def prepare(ctx):
    pattern, config = write_pretraining_data(ctx, shards=1)
    args = ["--input_file=" + pattern, "--output_dir=" + ctx.out, "--do_train=True",
            "--do_eval=False", "--bert_config_file=" + config, "--train_batch_size=2",
            "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDICTIONS,
            "--num_train_steps=2", "--num_warmup_steps=1", "--learning_rate=2e-5",
            "--save_checkpoints_steps=2", "--iterations_per_loop=1", "--distributed=False"]
    return args, {}
