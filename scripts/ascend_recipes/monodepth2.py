"""Monodepth2 (contrib/cv MONO): ``monodepth2.py train <config.yml> <ckpt name>`` as npu_train.sh
runs it, with a small config of the keys the learner reads and a KITTI-style dump.

The YAML config (the one npu_train.sh names, config/monodepth2_kitti.yml, is not in the model
directory) points ``dataset.root_dir`` at a folder with ``train.txt`` (lines ``<subfolder>
<frame id>``), ``<frame id>.jpg`` (3 frames side by side: height x 3*width) and
``<frame id>_cam.txt`` (the 3x3 intrinsics on one comma-separated line); 4 frames at batch 2 and
one epoch are 2 steps. No ResNet-18 weights (``torch_res18_ckpt: ''``): trained from scratch.

The learner calls ``np.float``/``np.int`` (removed in NumPy 1.24), so it needs NumPy < 1.24.
"""
import json

from ascend_recipes import frame_sequence_dump, write_text

MODEL_DIR = "TensorFlow/contrib/cv/MONO_ID1240_for_TensorFlow"
ENTRY = "monodepth2.py"
TF1 = True
CWD = "work"

HEIGHT, WIDTH, FRAMES = 64, 192, 4


def prepare(ctx):
    root = frame_sequence_dump(ctx, "kitti", "2011_09_26_drive_0001_sync_02", HEIGHT, WIDTH,
                               FRAMES, "120.0,0.0,96.0,0.0,120.0,32.0,0.0,0.0,1.0")
    config = {  # YAML is a superset of JSON
        "dataset": {"root_dir": root, "image_height": HEIGHT, "image_width": WIDTH,
                    "min_depth": 0.1, "max_depth": 100.0, "preprocess": True},
        "model": {"root_dir": ctx.path("models", "x")[:-2], "batch_size": 2, "num_source": 3,
                  "num_scales": 4, "epoch": 1, "learning_rate": 1e-4, "beta1": 0.9,
                  "reproj_alpha": 0.85, "smooth_alpha": 0.001, "batch_norm_decay": 0.95,
                  "batch_norm_epsilon": 1e-5, "pose_scale": 0.01, "pose_type": "seperate",
                  "auto_mask": True, "continue_ckpt": "", "torch_res18_ckpt": "",
                  "summary_freq": 1},
        "output_dir": ctx.path("output", "x")[:-2]}
    path = write_text(ctx.path("config", "monodepth2_kitti.yml"), json.dumps(config, indent=1))
    ctx.path("models", "x")
    return ["train", path, "tf_monodepth2_train"], {}
