"""DenseNet (TF2, ``main.py``): Keras ``fit`` through ``npu_device``'s ``NpuLossScaleOptimizer``
on Fashion-MNIST read with ``tfds.load("fashion_mnist", data_dir=--data_dir, download=False)``.

The recipe writes a TFDS-prepared ``fashion_mnist`` folder (``<data_dir>/fashion_mnist/<version>``:
TFRecord shards, ``dataset_info.json``, ``features.json``) with tensorflow-datasets' own
``SequentialWriter`` and the dataset builder's own ``DatasetInfo``, so ``tfds.load`` reads it as
the prepared download: 20 train and 10 test 28x28x1 images of random pixels, labels 0-9. The
script triples the train images by augmentation and keeps 80 % for training (48); 3 steps of
batch 8 in one epoch, then its validation pass. ``precision_mode`` stays the script's default,
``allow_mix_precision``.

It saves its weights to ``checkpoint/tf_model`` under the working folder: it runs from the
recipe's work folder. ``densenet.py`` imports ``npu_convert_dropout``, whose ``npu_ops.py``
takes ``drop_out_gen_mask``/``drop_out_do_mask`` from ``npu_device.gen_npu_ops``.
"""
import os

MODEL_DIR = "TensorFlow2/built-in/cv/image_classification/densenet_ID3534_for_TensorFlow2.X"
ENTRY = "main.py"
TF1 = False
CWD = "work"


def write_fashion_mnist(data_dir, train=20, test=10, seed=0):
    """A prepared ``fashion_mnist`` of random images in ``data_dir``, written by TFDS itself."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    info = tfds.builder("fashion_mnist", data_dir=data_dir).info
    os.makedirs(info.data_dir, exist_ok=True)  # <data_dir>/fashion_mnist/<version>
    rng = np.random.RandomState(seed)
    writer = tfds.core.SequentialWriter(ds_info=info, max_examples_per_shard=1000)
    writer.initialize_splits(["train", "test"])
    for split, count in (("train", train), ("test", test)):
        writer.add_examples({split: [
            {"image": rng.randint(0, 256, (28, 28, 1)).astype(np.uint8), "label": i % 10}
            for i in range(count)]})
    writer.close_all()
    return data_dir


def prepare(ctx):
    data = write_fashion_mnist(os.path.join(ctx.work, "tfds"))
    args = ["--data_dir=" + data, "--train_epochs=1", "--batch_size=8", "--steps_per_epoch=3",
            "--log_steps=1"]
    return args, {}
