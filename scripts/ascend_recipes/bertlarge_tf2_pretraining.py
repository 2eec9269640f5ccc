"""BertLarge (TF2, ``bert/run_pretraining.py``): MLPerf-style BERT pre-training in the model
garden's custom loop through ``npu_device``'s ``NpuLossScaleOptimizer`` (``--dtype=fp16
--loss_scale=dynamic``).

The arguments are those of ``test/train_performance_1p.sh`` (``--optimizer_type=lamb``,
``--distribution_strategy=one_device``, ``--num_gpus=1``, evaluation before training) made small:
pre-training TFRecords (unpacked features), a tiny BERT config, batches of 2, 2 steps in one loop,
4 evaluation samples (the default 10000 is more than the records). No initial checkpoint (the
script starts from random weights without one). ``--use_npu_lamb=False``: the script's LAMB in
TensorFlow ops (its own flag) instead of the device's fused kernels
``npu_device.gen_npu_ops.lamb_apply_optimizer_assign``/``lamb_apply_weight_assign``, which are
not emulated. It runs from the recipe's work folder.

What it reads of TF 2.4/2.6 that TF 2.15 moved, given back by the emulator in the script's files:
``tensorflow.python.distribute.distribution_strategy_context``, ``keras.optimizer_v2`` (its LAMB
is an ``OptimizerV2``, which ``NpuLossScaleOptimizer`` takes as the adapter did),
``ops.Tensor``/``IndexedSlices``/``convert_to_tensor_v2_with_dispatch``. Its other optimizer,
``adamw``, subclasses ``tf.keras.optimizers.Adam`` as an ``OptimizerV2`` and does not fit Keras
2.11+ optimizers (see the BERT recipe).
"""
import os

from ascend_recipes.bertbase_google_pretraining import PREDICTIONS, SEQ, write_pretraining_data

MODEL_DIR = "TensorFlow2/built-in/nlp/BertLarge_ID0634_for_TensorFlow2.X"
ENTRY = "bert/run_pretraining.py"
TF1 = False
CWD = "work"


def prepare(ctx):
    pattern, config = write_pretraining_data(ctx)
    args = ["--all_reduce_alg=nccl", "--bert_config_file=" + config, "--beta_1=0.91063",
            "--beta_2=0.96497", "--device_warmup=False", "--do_eval=True", "--dtype=fp16",
            "--eval_batch_size=2", "--train_files=" + pattern, "--eval_files=" + pattern,
            "--learning_rate=1e-4", "--loss_scale=dynamic",
            "--max_predictions_per_seq=%d" % PREDICTIONS, "--max_seq_length=%d" % SEQ,
            "--model_dir=" + os.path.join(ctx.out, "ckpt"), "--num_accumulation_steps=1",
            "--distribution_strategy=one_device", "--num_gpus=1", "--num_steps_per_epoch=2",
            "--num_train_epochs=1", "--optimizer_type=lamb", "--scale_loss=False",
            "--steps_between_eval=2", "--steps_per_loop=2", "--stop_steps=2",
            "--enable_checkpoint_and_summary=True", "--train_batch_size=2", "--verbosity=0",
            "--warmup_steps=0", "--num_eval_samples=4", "--use_npu_lamb=False"]
    return args, {}
