"""Meta Pseudo Labels (contrib/cv, CIFAR-10-4000 MPL on a WRN-28-2): npu_train.sh's arguments,
smaller.

The script reads CIFAR-10 in its binary batches (``data_batch_1..5.bin`` for the labelled and
unlabelled streams, ``test_batch.bin`` for the eval stream) from ``--data_path``; the generic
synthetic data folder has them. Two steps at batch 2 (7x unlabelled, as npu_train.sh), no eval or
checkpoint (``--save_every`` beyond the run).
"""
MODEL_DIR = "TensorFlow/contrib/cv/meta-pseudo-labels/META_PSEUDO_LABEL_ID2024_for_TensorFlow"
ENTRY = "main.py"
TF1 = True


def prepare(ctx):
    args = ["--data_path=" + ctx.data, "--output_path=" + ctx.out, "--task_mode=train",
            "--master=" + ctx.path("worker", "x")[:-2], "--dataset_name=cifar10_4000_mpl",
            "--model_type=wrn-28-2", "--optim_type=momentum", "--lr_decay_type=cosine",
            "--nouse_augment", "--alsologtostderr", "--running_local_dev", "--image_size=32",
            "--num_classes=10", "--log_every=1", "--save_every=1000", "--train_batch_size=2",
            "--eval_batch_size=2", "--uda_data=7", "--weight_decay=5e-4",
            "--num_train_steps=2", "--augment_magnitude=16", "--batch_norm_batch_size=256",
            "--dense_dropout_rate=0.2", "--ema_decay=0.995", "--label_smoothing=0.15",
            "--mpl_teacher_lr=0.05", "--mpl_teacher_lr_warmup_steps=5000",
            "--mpl_student_lr=0.05", "--mpl_student_lr_wait_steps=1000",
            "--mpl_student_lr_warmup_steps=5000", "--uda_steps=5000", "--uda_temp=0.7",
            "--uda_threshold=0.6", "--uda_weight=8"]
    return args, {}
