"""BERT (TF2, ``run_pretraining.py``): pre-training in the model garden's custom training loop
through ``npu_device``'s ``NpuLossScaleOptimizer`` (built with ``--use_fp16``, which also sets
the ``mixed_float16`` policy).

The arguments are those of the model's LAMB launchers (``test/train_performance_bertbase_1p_
1024bs_lamb_phase1.sh``: ``--optimizer_type=LAMB``, ``--use_fp16``,
``--distribution_strategy=one_device``, ``--num_gpus=1``; ``precision_mode`` stays the
launcher's and the script's default, ``allow_fp32_to_fp16``) made small: pre-training TFRecords
(the features ``create_pretraining_data.py`` writes, sequences of 16 with 4 predictions), a tiny
BERT config, batches of 2, 2 steps in one loop of 2 (a loop of 1 runs the step eagerly, where
the adapter's dropout refuses to run, as on the device), then the evaluation the script runs at
the end of the epoch. It writes its dllogger file relative to the working folder: it runs from
the recipe's work folder.

Why LAMB: with ``--optimizer_type=adam`` the script's ``AdamWeightDecay`` subclasses
``tf.keras.optimizers.Adam`` as an ``OptimizerV2`` (TF 2.4), passing ``name`` where Keras 2.11+
takes ``weight_decay``; its first step fails in Keras (``Cast string to float is not
supported``). TensorFlow Addons' LAMB is an ``OptimizerV2`` in TF 2.15 too, which
``NpuLossScaleOptimizer`` takes as the adapter did.

Third-party packages it needs: NVIDIA's DLLogger (not on PyPI: pip installs it from its git
repository), TensorFlow Hub 0.15, TensorFlow Addons 0.23, absl-py < 2.
"""
import os

from ascend_recipes.bertbase_google_pretraining import PREDICTIONS, SEQ, write_pretraining_data

MODEL_DIR = "TensorFlow2/built-in/nlp/BERT_ID2478_for_TensorFlow2.X"
ENTRY = "run_pretraining.py"
TF1 = False
CWD = "work"


def prepare(ctx):
    pattern, config = write_pretraining_data(ctx)
    args = ["--input_files=" + pattern, "--eval_files=" + pattern,
            "--model_dir=" + os.path.join(ctx.out, "ckpt"), "--bert_config_file=" + config,
            "--train_batch_size=2", "--eval_batch_size=2", "--max_seq_length=%d" % SEQ,
            "--max_predictions_per_seq=%d" % PREDICTIONS, "--num_steps_per_epoch=2",
            "--num_train_epochs=1", "--steps_per_loop=2", "--save_checkpoint_steps=2",
            "--warmup_steps=1", "--distribution_strategy=one_device", "--num_gpus=1",
            "--stop_steps=2", "--num_accumulation_steps=1", "--learning_rate=1e-4",
            "--optimizer_type=LAMB", "--use_reducemean=False", "--use_fp16",
            "--dllog_path=" + os.path.join(ctx.out, "bert_dllogger.json")]
    return args, {}
