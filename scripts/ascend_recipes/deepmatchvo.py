"""DeepMatchVO (contrib/cv): a KITTI-style dump of 3-frame sequences, as data/prepare_train_data.py
writes it.

``--dataset_dir`` holds ``train.txt`` (lines ``<subfolder> <frame id>``) and, per frame,
``<subfolder>/<frame id>.jpg`` (the three frames side by side: height x 3*width) and
``<subfolder>/<frame id>_cam.txt`` (the 3x3 intrinsics on one comma-separated line).
Trained from scratch (no ``--init_ckpt_file``), without matches (``--match_num 0``, the default).

Note: the script's ``NPULossScaleOptimizer`` lines in ``deep_slam.py`` sit inside a string
literal (disabled); its train op is a plain ``AdamOptimizer``, so a run can only end as
``no-loss-scale-step`` (it does: 2 Adam steps, clean exit).
"""
from ascend_recipes import frame_sequence_dump

MODEL_DIR = "TensorFlow/contrib/cv/DeepMatchVO_ID2363_for_TensorFlow"
ENTRY = "train.py"
TF1 = True
CWD = "work"

HEIGHT, WIDTH, FRAMES = 128, 416, 4


def prepare(ctx):
    root = frame_sequence_dump(ctx, "kitti_odom", "00_02", HEIGHT, WIDTH, FRAMES,
                               "241.67,0.,204.17,0.,246.28,59.0,0.,0.,1.")
    args = ["--dataset_dir", root, "--checkpoint_dir", ctx.path("ckpt", "x")[:-1],
            "--img_height", str(HEIGHT), "--img_width", str(WIDTH), "--batch_size", "2",
            "--seq_length", "3", "--max_steps", "2", "--summary_freq", "1",
            "--save_freq", "1000", "--learning_rate", "0.001", "--steps_per_epoch", "2"]
    return args, {}
