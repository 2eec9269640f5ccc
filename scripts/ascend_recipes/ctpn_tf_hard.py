"""CTPN (ModelZoo_CTPN_TF_HARD, 00-access/main/train_npu.py): images with text-line box labels.

``train_npu.py`` reads ``<dataset_dir>/image/*.jpg|png`` and, per image, ``<dataset_dir>/label/
<name>.txt`` (one ``x_min,y_min,x_max,y_max`` line per box, the split 16-pixel-wide boxes of its
``utils/prepare`` step), and restores ImageNet VGG-16 from ``--pretrained_model_path`` (a TF-Slim
``vgg_16`` checkpoint, missing variables ignored). The recipe writes 3 images with a few boxes
each, a VGG-16 checkpoint of random conv weights, and runs 2 steps on 192x256 inputs (the
script's batch is one image).
"""
import os

import ascend_recipes as common

MODEL_DIR = "TensorFlow/built-in/cv/detection/ModelZoo_CTPN_TF_HARD/ModelZoo_CTPN_TF_HARD/00-access"
ENTRY = "main/train_npu.py"

_VGG16 = (("conv1", 2, 3, 64), ("conv2", 2, 64, 128), ("conv3", 3, 128, 256),
          ("conv4", 3, 256, 512), ("conv5", 3, 512, 512))


def _vgg16_checkpoint(prefix):
    """A TF-Slim ``vgg_16`` checkpoint (conv layers) of random weights."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    rng = np.random.RandomState(0)
    graph = tf.Graph()
    with graph.as_default():
        for block, repeat, cin, cout in _VGG16:
            for i in range(1, repeat + 1):
                scope = "vgg_16/%s/%s_%d/" % (block, block, i)
                fan_in = cin if i == 1 else cout
                tf.compat.v1.Variable(
                    rng.normal(0, (2.0 / (9 * fan_in)) ** 0.5, (3, 3, fan_in, cout))
                    .astype("float32"), name=scope + "weights")
                tf.compat.v1.Variable(np.zeros(cout, "float32"), name=scope + "biases")
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, prefix, write_meta_graph=False)
    return prefix


def prepare(ctx):
    data = os.path.join(ctx.work, "data", "mlt")
    for i in range(3):
        with open(ctx.path("data", "mlt", "image", "img_%d.png" % i), "wb") as out:
            out.write(common.png_bytes(120, 160, 3, seed=i))
        boxes = ["%d,%d,%d,%d" % (x, 30 + 10 * i, x + 15, 60 + 10 * i) for x in range(32, 112, 16)]
        common.write_text(os.path.join(data, "label", "img_%d.txt" % i), "\n".join(boxes) + "\n")
    vgg = _vgg16_checkpoint(ctx.path("data", "vgg_16.ckpt"))
    args = ["--dataset_dir=" + data, "--pretrained_model_path=" + vgg,
            "--checkpoint_path=" + os.path.join(ctx.out, "checkpoints_mlt") + os.sep,
            "--logs_path=" + os.path.join(ctx.out, "logs_mlt") + os.sep,
            "--max_steps=2", "--num_readers=1", "--save_checkpoint_steps=2",
            "--inputs_height=192", "--inputs_width=256", "--learning_rate=1e-5"]
    return args, {}
