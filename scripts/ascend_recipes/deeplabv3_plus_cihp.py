"""DeepLabV3+ (TF2, ``train.py``): Keras ``fit`` through ``npu_device``'s
``NpuLossScaleOptimizer`` on the CIHP human-parsing images.

The script reads ``<data_dir>/instance-level_human_parsing/instance-level_human_parsing/
Training/Images/*`` (JPEG) and ``Category_ids/*`` (one-channel PNG of class ids 0-19), sorted,
takes the first 1000 pairs for training and the next 50 for validation, and resizes every image
to 512x512. With 1000 pairs or fewer its validation list is empty and ``tf.data`` types the
empty file list as float32, so the script stops before building the model: the recipe writes
1004 small pairs (16x16; 2 for validation at batch 2). One epoch is then 500 steps at 512x512:
the script trains until the run's time limit.

Not runnable offline: the backbone is ``keras.applications.ResNet50(weights="imagenet")``, which
fetches ``resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5`` into ``~/.keras/models/`` and
checks its MD5 against the value Keras hard-codes; a file of other weights (random ones in the
same layout) fails the check and is downloaded again. Only the genuine ImageNet file, already in
the Keras cache (for example a CI cache of ``~/.keras/models``), lets the script start without a
network; the recipe cannot write it. ``precision_mode`` stays the script's default,
``allow_mix_precision``.
"""
import os

MODEL_DIR = "TensorFlow2/built-in/keras_sample/cv/deeplabv3_plus_ID2503_for_TensorFlow2.X"
ENTRY = "train.py"
TF1 = False

NUM_CLASSES = 20


def write_cihp(root, pairs=1004, size=16, seed=0):
    """``root/instance-level_human_parsing/instance-level_human_parsing/Training`` with
    ``pairs`` JPEG images and PNG class-id masks of the same names."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    base = os.path.join(root, "instance-level_human_parsing", "instance-level_human_parsing",
                        "Training")
    for folder in ("Images", "Category_ids"):
        os.makedirs(os.path.join(base, folder), exist_ok=True)
    rng = np.random.RandomState(seed)
    for i in range(pairs):
        name = "%07d" % (i + 1)
        image = tf.io.encode_jpeg(rng.randint(0, 256, (size, size, 3)).astype(np.uint8))
        mask = tf.io.encode_png(rng.randint(0, NUM_CLASSES, (size, size, 1)).astype(np.uint8))
        with open(os.path.join(base, "Images", name + ".jpg"), "wb") as out:
            out.write(image.numpy())
        with open(os.path.join(base, "Category_ids", name + ".png"), "wb") as out:
            out.write(mask.numpy())
    return root


def prepare(ctx):
    data = write_cihp(os.path.join(ctx.work, "data"))
    return ["--data_dir=" + data, "--batch_size=2", "--epochs=1", "--log_steps=1"], {}
