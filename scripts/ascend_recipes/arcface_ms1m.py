"""ArcFace (InsightFace-TF port): ``train_npu.py`` reads a YAML config (``--code_dir`` joined with
``--config_path``; the ``configs/`` folder it names is not in the model directory, so the recipe
writes one with the keys the code reads, a small modified ResNet-50 at 64 pixels) and a TFRecord
of raw uint8 images (``img`` bytes, ``shape`` [h, w, 3], ``label``), as its
``data/classificationDataTool.py`` writes them.

Note: the script trains with a plain ``tf.train.MomentumOptimizer``; it only imports contrib's
``ExponentialUpdateLossScaleManager`` (unused), which is why it is among the loss-scale scripts.
It cannot train through ``NPULossScaleOptimizer``: the best outcome is ``no-loss-scale-step``."""
import os

import numpy as np

from ascend_recipes import tf_example, write_text, write_tfrecord

MODEL_DIR = "TensorFlow/contrib/cv/ArcFace_ID0887_for_TensorFlow"
ENTRY = "train_npu.py"

_SIZE = 64
_CLASSES = 4

_CONFIG = """\
output_dir: {out}
gpu_num: 1
batch_size: 2
image_size: {size}
augment_flag: true
augment_margin: 16
epoch_num: 1
step_per_epoch: 2
val_freq: 1000
val_data: {{}}
val_bn_train: false
lr_steps: [40000, 60000, 80000]
lr_values: [0.004, 0.002, 0.0012, 0.0004]
momentum: 0.9
train_data: [train.tfrecord]
pretrained_model: ''
backbone_type: resnet_v2_m_50
bn_decay: 0.9
weight_decay: 0.0005
out_type: E
embd_size: 32
keep_prob: 0.4
loss_type: arcface
logits_scale: 64.0
logits_margin: 0.5
class_num: {classes}
"""


def prepare(ctx):
    data = os.path.join(ctx.work, "dataset")
    rng = np.random.RandomState(0)
    records = []
    for i in range(8):
        img = rng.randint(0, 256, (_SIZE, _SIZE, 3)).astype(np.uint8)
        records.append(tf_example({"img": [img.tobytes()], "shape": [_SIZE, _SIZE, 3],
                                   "label": [i % _CLASSES]}))
    write_tfrecord(os.path.join(data, "train.tfrecord"), records)
    write_text(os.path.join(ctx.work, "configs", "config.yaml"),
               _CONFIG.format(out=ctx.out, size=_SIZE, classes=_CLASSES))
    args = ["--config_path=configs/config.yaml", "--code_dir=" + ctx.work,
            "--input_dir=" + data, "--result=" + ctx.out, "--num_epochs=1",
            "--step_per_epoch=2", "--val_freq=1000", "--batch_size=2", "--chip=npu",
            "--platform=apulis"]
    return args, {}
