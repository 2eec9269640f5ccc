"""DELF (train.py): Google Landmarks TFRecords plus ImageNet ResNet-50 weights in Keras' h5.

``train.py`` reads ``<data_path>/google-landmark/tfrecord/train*`` and ``validation*``
(``tf.train.Example`` with ``image/encoded`` JPEG and ``image/class/label``) and, unless it
restores a checkpoint, loads ``<data_path>/resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5``
by layer name (Keras' classic ResNet-50 names: ``res2a_branch2a``, ``bn2a_branch2a``...). The
recipe writes a few JPEG records and an h5 file of random weights in that layout (Keras'
``layer_names``/``weight_names`` attributes); 2 steps of batch 2 on 64x64 images.
"""
import os

import ascend_recipes as common

MODEL_DIR = "TensorFlow/contrib/cv/delf/DELF_ID2024_for_TensorFlow"
ENTRY = "train.py"

# (stage, blocks, [filters1, filters2, filters3], input channels of the stage)
_STAGES = ((2, "abc", (64, 64, 256), 64), (3, "abcd", (128, 128, 512), 256),
           (4, "abcdef", (256, 256, 1024), 512), (5, "abc", (512, 512, 2048), 1024))


def _resnet50_notop_h5(path):
    """Random weights for every conv/bn layer inside ResNet-50's blocks, in Keras' h5 layout."""
    import h5py  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    rng = np.random.RandomState(0)
    layers = []  # (name, [(weight name, array)])

    def conv(name, size, cin, cout):
        kernel = rng.normal(0, (2.0 / (size * size * cin)) ** 0.5, (size, size, cin, cout))
        layers.append((name, [("kernel:0", kernel.astype("float32")),
                              ("bias:0", np.zeros(cout, "float32"))]))

    def bn(name, channels):
        layers.append((name, [("gamma:0", np.ones(channels, "float32")),
                              ("beta:0", np.zeros(channels, "float32")),
                              ("moving_mean:0", np.zeros(channels, "float32")),
                              ("moving_variance:0", np.ones(channels, "float32"))]))

    conv("conv1", 7, 3, 64)
    bn("bn_conv1", 64)
    for stage, blocks, (f1, f2, f3), cin in _STAGES:
        for block in blocks:
            base = "%d%s_branch" % (stage, block)
            first = cin if block == "a" else f3
            conv("res" + base + "2a", 1, first, f1)
            bn("bn" + base + "2a", f1)
            conv("res" + base + "2b", 3, f1, f2)
            bn("bn" + base + "2b", f2)
            conv("res" + base + "2c", 1, f2, f3)
            bn("bn" + base + "2c", f3)
            if block == "a":
                conv("res" + base + "1", 1, cin, f3)
                bn("bn" + base + "1", f3)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with h5py.File(path, "w") as out:
        out.attrs["layer_names"] = np.array([name.encode() for name, _ in layers], "S")
        for name, weights in layers:
            group = out.create_group(name)
            group.attrs["weight_names"] = np.array(
                [("%s/%s" % (name, w)).encode() for w, _ in weights], "S")
            for weight, value in weights:
                group.create_dataset("%s/%s" % (name, weight), data=value)
    return path


def prepare(ctx):
    data = os.path.join(ctx.work, "data")
    for split, count in (("train", 4), ("validation", 2)):
        records = [common.tf_example({
            "image/height": [80], "image/width": [80], "image/channels": [3],
            "image/format": [b"JPEG"], "image/id": [b"%s%d" % (split.encode(), i)],
            "image/filename": [b"%s%d.jpg" % (split.encode(), i)],
            "image/encoded": [common.jpeg_bytes(80, 80, seed=i)],
            "image/class/label": [i % 3]}) for i in range(count)]
        common.write_tfrecord(os.path.join(data, "google-landmark", "tfrecord",
                                           "%s-00000-of-00001" % split), records)
    _resnet50_notop_h5(os.path.join(data, "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"))
    args = ["--data_path=" + data, "--output_path=" + ctx.out, "--dataset_version=gld_v1",
            "--batch_size=2", "--max_iters=2", "--image_size=64", "--report_interval=1",
            "--eval_interval=1000", "--save_interval=1000"]
    return args, {}
