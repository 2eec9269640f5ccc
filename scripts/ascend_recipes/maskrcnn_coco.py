"""Mask R-CNN (mask_rcnn_main.py): COCO-style TFRecords with PNG instance masks, small config.

The config module (``configs/mask_rcnn_config_8p_includeMask.py``) holds absolute data paths; the
script's own way to point it elsewhere is ``--config_file`` (a YAML file of overrides), which is
what the recipe uses. ``--Data_path`` is left at its default ``./``: any other value makes the
script rewrite that config module in place. The records carry ``image/encoded`` (PNG),
``image/height``/``width``, ``image/object/bbox/*`` (normalised), ``class/label``, ``is_crowd``,
``area`` and ``image/object/mask`` (one PNG per object). The override file shrinks the model's
work (256x256 images, fewer proposals and RoIs, 2 steps, one step per loop) and trains from
``checkpoint`` is the ImageNet ResNet-50 the model restores (it needs one: its scaffold is built
only with a checkpoint or warm start): the recipe writes one of random weights, its variables
named and shaped by building the script's own ``resnet.py`` backbone under ``resnet50/`` (in a
subprocess, as the backbone would be exported), with the ``Momentum`` slots of an ImageNet
run, which the model's ``init_from_checkpoint`` of ``resnet50/`` asks for too.

The image size (1024x1024) and the mask crop (112) are fixed in the script's input pipeline, so
a CPU step takes minutes: the first step comes some 8 minutes after the start on 2 cores.
``hyperparameters/params_dict.py`` reads the YAML with ``yaml.load(text)`` (no ``Loader``),
which needs PyYAML < 6 (PyYAML 6 raises ``TypeError: load() missing ... 'Loader'``).
"""
import os
import subprocess
import sys

import ascend_recipes as common

MODEL_DIR = "TensorFlow/built-in/cv/detection/MaskRcnn_ID0011_for_TensorFlow"
# 1024x1024 images fixed by the script: the first step comes after some 8 minutes
TIMEOUT = 900
ENTRY = "mask_rcnn_main.py"


def _record(index):
    boxes = [(0.10, 0.15, 0.55, 0.60), (0.40, 0.30, 0.90, 0.85)]   # ymin, xmin, ymax, xmax
    return common.tf_example({
        "image/encoded": [common.png_bytes(64, 64, 3, seed=index)],
        "image/source_id": [b"%d" % (index + 1)],
        "image/height": [64], "image/width": [64],
        "image/object/bbox/ymin": [b[0] for b in boxes],
        "image/object/bbox/xmin": [b[1] for b in boxes],
        "image/object/bbox/ymax": [b[2] for b in boxes],
        "image/object/bbox/xmax": [b[3] for b in boxes],
        "image/object/class/label": [1 + index % 3, 5],
        "image/object/is_crowd": [0, 0],
        "image/object/area": [0.2 * 64 * 64, 0.25 * 64 * 64],
        "image/object/mask": [common.png_bytes(64, 64, 1, seed=50 + index + k) for k in range(2)],
    })


_BACKBONE = """
import sys
sys.path.insert(0, sys.argv[1])
import tensorflow.compat.v1 as tf
tf.disable_eager_execution()
import resnet
with tf.variable_scope("resnet50"):
    resnet.resnet_v1("resnet50", conv0_kernel_size=7, conv0_space_to_depth_block_size=0,
                     num_batch_norm_group=-1)(tf.zeros([1, 64, 64, 3]), False)
for var in tf.trainable_variables():  # a Momentum-trained ImageNet checkpoint has the slots too
    tf.Variable(tf.zeros(var.shape), name=var.op.name + "/Momentum")
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    tf.train.Saver().save(sess, sys.argv[2], write_meta_graph=False)
"""


def _backbone_checkpoint(ctx):
    prefix = ctx.path("data", "resnet-50-imagenet", "model.ckpt")
    subprocess.run([sys.executable, "-c", _BACKBONE, ctx.model_dir, prefix], check=True,
                   capture_output=True, cwd=ctx.work, timeout=300)
    return prefix


def prepare(ctx):
    data = os.path.join(ctx.work, "data")
    common.write_tfrecord(os.path.join(data, "train-00000-of-00001.tfrecord"),
                          [_record(i) for i in range(4)])
    common.write_tfrecord(os.path.join(data, "val-00000-of-00001.tfrecord"),
                          [_record(10 + i) for i in range(2)])
    overrides = {
        "training_file_pattern": os.path.join(data, "train*"),
        "validation_file_pattern": os.path.join(data, "val*"),
        "val_json_file": "", "checkpoint": _backbone_checkpoint(ctx),
        "train_batch_size": 2, "eval_batch_size": 2,
        "total_steps": 2, "warmup_steps": 1, "iterations_per_loop": 1,
        "rpn_pre_nms_topn": 200, "rpn_post_nms_topn": 100, "rpn_batch_size_per_im": 64,
        "batch_size_per_im": 32, "fast_rcnn_mlp_head_dim": 64,
        "test_rpn_pre_nms_topn": 100, "test_rpn_post_nms_topn": 100,
    }
    config = common.write_text(os.path.join(ctx.work, "maskrcnn_small.yaml"), "".join(
        "%s: %s\n" % (key, repr(value) if isinstance(value, str) else value)
        for key, value in overrides.items()))
    args = ["--mode=train", "--rank=0", "--total_steps=2", "--train_batch_size=2",
            "--eval_batch_size=2", "--model_dir=" + ctx.out, "--config_file=" + config]
    return args, {}
