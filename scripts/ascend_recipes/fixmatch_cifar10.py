"""FixMatch (google-research's libml, CTAugment): ``fixmatch.py`` reads, under ``--data_dir``,
``SSL2/cifar10.<seed>@<labels>-label.tfrecord``, ``SSL2/cifar10-unlabel.tfrecord`` and
``cifar10-test.tfrecord``: records with ``image`` (an encoded PNG, 32x32x3) and ``label``
(int64), as its ``scripts/create_datasets.py``/``create_split.py`` write them.

The script's ``train`` sets its own sample counts (``train_nimg = report_nimg = 328704``) and
checks ``--less_step`` only after a whole report period, so it trains until the run's time limit
(``trained, then timeout``); a small model (``--filters 16 --repeat 1``) keeps each step short.

Its accuracy summaries are ``tf.py_func``s that call ``session.run`` from inside the training
step's run (``libml/train.py`` ``add_summaries``): two of them block the inter-op pool, whose
default size is the number of cores, so on a 2-core machine the first summary step deadlocks;
``TF_NUM_INTEROP_THREADS=8`` gives the pool of a larger host.

Third-party versions it needs (TF 1.15 era): NumPy < 1.24 (``libml/augment.py`` passes a
generator to ``np.stack``) and Pillow < 10 (``libml/ctaugment.py`` uses ``Image.ANTIALIAS``).
With NumPy 1.26 the run stops before its first step."""
import os

from ascend_recipes import png_label_records as _records, write_tfrecord

MODEL_DIR = "TensorFlow/contrib/cv/Fixmatch_ID0843_for_TensorFlow"
# train() runs over a fixed 328704 images: it trains until stopped
TIMEOUT = 300
ENTRY = "fixmatch.py"
CWD = "work"


def prepare(ctx):
    data = os.path.join(ctx.work, "ML_DATA")
    write_tfrecord(os.path.join(data, "SSL2", "cifar10.5@40-label.tfrecord"), _records(10, 0))
    write_tfrecord(os.path.join(data, "SSL2", "cifar10-unlabel.tfrecord"), _records(16, 100))
    write_tfrecord(os.path.join(data, "cifar10-test.tfrecord"), _records(4, 200))
    args = ["--dataset=cifar10.5@40-1", "--data_dir=" + data,
            "--train_dir=" + os.path.join(ctx.out, "experiments"),
            "--batch=2", "--uratio=2", "--filters=16", "--repeat=1", "--less_step=1",
            "--train_kimg=1", "--report_kimg=1", "--save_kimg=1", "--para_parse=1",
            "--para_augment=1", "--shuffle=16"]
    return args, {"ML_DATA": data, "TF_NUM_INTEROP_THREADS": "8"}
