"""PRSR (contrib/cv/prsr, pixel-recursive super-resolution on CelebA): a list file of JPEG faces.

The solver reads ``--imgs_list_path``, one image path per line, decodes each JPEG and resizes it
to 32x32 (high resolution) and 8x8 (low resolution); training runs until the dataset of
``--num_epoch`` epochs is exhausted. The recipe gives it 4 images, 1 epoch at batch 2.

Barriers the recipe cannot lift (the script is not changed): ``train.py`` and ``solver.py``
import ``precision_tool.config``/``precision_tool.tf_config`` (Ascend's precision-analysis tool,
a folder users copy next to their code; PRSR's directory has none), and ``train.py`` lists the
hard-coded ``/home/disk/celebA`` at import time, before any flag is read, writing
``./train.txt`` from it: the data must be at that absolute path, outside a recipe's work folder.
"""
from ascend_recipes import jpeg_bytes, write_text

MODEL_DIR = "TensorFlow/contrib/cv/prsr/PRSR_ID2111_for_TensorFlow"
ENTRY = "train.py"
TF1 = True
CWD = "work"


def prepare(ctx):
    paths = []
    for i in range(4):
        path = ctx.path("celebA", "%06d.jpg" % (i + 1))
        with open(path, "wb") as out:
            out.write(jpeg_bytes(64, 64, seed=i))
        paths.append(path)
    listing = write_text(ctx.path("lists", "train.txt"), "\n".join(paths) + "\n")
    args = ["--imgs_list_path", listing, "--train_dir", ctx.path("output", "x")[:-2],
            "--samples_dir", ctx.path("samples", "x")[:-2], "--num_epoch", "1",
            "--batch_size", "2", "--use_gpu", "False"]
    return args, {}
