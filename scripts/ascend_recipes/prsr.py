"""PRSR (contrib/cv/prsr, pixel-recursive super-resolution on CelebA): a list file of JPEG faces.

The solver reads ``--imgs_list_path``, one image path per line, decodes each JPEG and resizes it
to 32x32 (high resolution) and 8x8 (low resolution); training runs until the dataset of
``--num_epoch`` epochs is exhausted. The recipe gives it 4 images, 1 epoch at batch 2.

What the script expects of its machine, given as a user of it would (the script is not changed):

* ``train.py`` and ``solver.py`` import ``precision_tool.config``/``precision_tool.tf_config``:
  Ascend's precision-analysis tool, a folder users copy next to their code (PRSR's directory has
  none). The recipe puts a copy that another model directory of the corpus ships on
  ``PYTHONPATH`` (the first, in sorted order, with both modules);
* ``train.py`` lists the fixed ``/home/disk/celebA`` at import time, before any flag is read,
  writing ``./train.txt`` from it: ``FIXED_PATHS`` shows the recipe's images there, in the run's
  own mount namespace (root and ``unshare`` needed);
* ``solver.py`` sets the session's ``modify_mixlist`` to the fixed
  ``/home/ma-user/modelarts/user-job-dir/code/ops_info.json``, its code folder on ModelArts, where
  the model directory's own ``ops_info.json`` (``ReduceSumD`` on the black list) would be: the
  recipe copies that file of the model directory into a folder ``FIXED_PATHS`` shows at that
  code folder.
"""
import os
import shutil

from ascend_recipes import jpeg_bytes, precision_tool_dir, write_text

MODEL_DIR = "TensorFlow/contrib/cv/prsr/PRSR_ID2111_for_TensorFlow"
ENTRY = "train.py"
TF1 = True
CWD = "work"
MODELARTS_CODE = "/home/ma-user/modelarts/user-job-dir/code"
FIXED_PATHS = {"/home/disk/celebA": "celebA", MODELARTS_CODE: "modelarts_code"}


def prepare(ctx):
    paths = []
    for i in range(4):
        path = ctx.path("celebA", "%06d.jpg" % (i + 1))
        with open(path, "wb") as out:
            out.write(jpeg_bytes(64, 64, seed=i))
        paths.append(path)
    shutil.copyfile(os.path.join(ctx.model_dir, "ops_info.json"),
                    ctx.path("modelarts_code", "ops_info.json"))
    listing = write_text(ctx.path("lists", "train.txt"), "\n".join(paths) + "\n")
    args = ["--imgs_list_path", listing, "--train_dir", ctx.path("output", "x")[:-2],
            "--samples_dir", ctx.path("samples", "x")[:-2], "--num_epoch", "1",
            "--batch_size", "2", "--use_gpu", "False"]
    return args, {"PYTHONPATH": os.path.dirname(precision_tool_dir(ctx.corpus))}
