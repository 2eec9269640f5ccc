"""InceptionV2 (ImageNet, Estimator): ``train.py`` reads ``train-*`` and ``validation-*``
TFRecords of the ImageNet build script's features (``image/encoded`` JPEG,
``image/class/label``, ``image/class/text``, ``image/object/bbox/*``) and crops them to 224
pixels; the step count is ``records // batch_size * max_epochs``."""
import os

from ascend_recipes import jpeg_bytes, tf_example, write_tfrecord

MODEL_DIR = "TensorFlow/built-in/cv/image_classification/InceptionV2_ID0670_for_TensorFlow"
ENTRY = "train.py"

_CLASSES = 10


def _records(count, seed):
    out = []
    for i in range(count):
        label = (seed + i) % _CLASSES
        out.append(tf_example({
            "image/encoded": [jpeg_bytes(64, 80, seed=seed + i)],
            "image/class/label": [label],
            "image/class/text": [b"class %d" % label],
            "image/object/bbox/xmin": [0.1], "image/object/bbox/ymin": [0.2],
            "image/object/bbox/xmax": [0.9], "image/object/bbox/ymax": [0.8]}))
    return out


def prepare(ctx):
    data = os.path.join(ctx.work, "imagenet")
    write_tfrecord(os.path.join(data, "train-00000-of-00001"), _records(4, 0))
    write_tfrecord(os.path.join(data, "validation-00000-of-00001"), _records(2, 100))
    # 4 records, batch 2, 1 epoch: 2 steps, one loop of iterations_per_loop=2
    args = ["--rank_size=1", "--mode=train", "--max_epochs=1", "--iterations_per_loop=2",
            "--data_dir=" + data, "--batch_size=2", "--lr=0.045", "--display_every=1",
            "--num_classes=%d" % _CLASSES, "--log_dir=" + os.path.join(ctx.out, "model"),
            "--eval_dir=" + os.path.join(ctx.out, "model"), "--log_name=inception_v2.log"]
    return args, {}
