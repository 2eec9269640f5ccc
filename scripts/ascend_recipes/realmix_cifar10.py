"""RealMix (MixMatch's libml): ``realmix.py`` reads, under ``$ML_DATA``,
``SSL/cifar10.<seed>@<labels>-label.tfrecord``, ``SSL/cifar10.<seed>@<labels>-unlabel.tfrecord``
and ``cifar10-test.tfrecord``: records with ``image`` (an encoded PNG, 32x32x3) and ``label``
(int64), as its ``scripts/create_split.py`` writes them.

Its model's placeholders are fixed at 64 images (``realmix.py`` ``model``), so the batch is 64
(the tiny record files are repeated). Its loop runs while ``step < (train_kimg << 10) -
epochs_ctrl`` (step counts images): ``--train_kimg=1 --epochs_ctrl=896`` stops after 128
images, 2 steps."""
import os

from ascend_recipes import png_label_records as _records, write_tfrecord

MODEL_DIR = "TensorFlow/contrib/cv/realmix_ID1248_for_TensorFlow"
ENTRY = "realmix.py"
CWD = "work"


def prepare(ctx):
    data = os.path.join(ctx.work, "ML_DATA")
    write_tfrecord(os.path.join(data, "SSL", "cifar10.1@250-label.tfrecord"), _records(8, 0))
    write_tfrecord(os.path.join(data, "SSL", "cifar10.1@250-unlabel.tfrecord"), _records(9, 100))
    write_tfrecord(os.path.join(data, "cifar10-test.tfrecord"), _records(4, 200))
    args = ["--dataset=cifar10.1@250-1", "--train_dir=" + os.path.join(ctx.out, "experiments"),
            "--filters=16", "--repeat=1", "--w_match=75", "--beta=0.75", "--custom_dataset=True",
            "--augment=cifar10", "--tsa=linear_schedule", "--epochs=1", "--batch=64",
            "--train_kimg=1", "--report_kimg=1", "--save_kimg=1", "--epochs_ctrl=896",
            "--steps_ctrl=2", "--para_parse=1", "--para_augment=1", "--shuffle=16"]
    return args, {"ML_DATA": data}
