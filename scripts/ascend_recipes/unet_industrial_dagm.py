"""UNet_Industrial (main.py): DAGM2007 class folder with train/test CSV lists and PNG images.

The model directory ships NVIDIA's old ``dllogger`` package in ``dllogger/`` (its README installs
it with pip); putting that folder on ``PYTHONPATH`` is what the install does. The arguments are
those of ``scripts/run_1p.sh`` (tinyUNet, adaptive loss, auto loss scaling) with 2 batches of 2
and ``--data_format=NHWC`` for the CPU.

It trains (one NPUEstimator loop of ``iterations_per_loop=10`` steps, the script's RunConfig),
but not through ``NPULossScaleOptimizer``: ``model/unet.py`` imports it and the loss-scale
managers, then wraps RMSProp in its own ``MixedPrecisionOptimizer(opt, scale=4096)`` (a static
loss scale) and ``NPUDistributedOptimizer``. The honest outcome is ``no-loss-scale-step``.
"""
import os

import ascend_recipes as common

MODEL_DIR = "TensorFlow/built-in/cv/image_segmentation/UNet_Industrial_ID0007_for_TensorFlow"
ENTRY = "main.py"
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _split(ctx, name, count):
    folder = ctx.path("data", "raw_images", "private", "Class1", name)
    os.makedirs(os.path.join(folder, "Label"), exist_ok=True)
    lines = ["Image,Mask,Label"]
    for i in range(count):
        image = "%04d.PNG" % i
        with open(os.path.join(folder, image), "wb") as out:
            out.write(common.png_bytes(32, 32, 1, seed=i))
        if i % 2:
            mask = "%04d_label.PNG" % i
            with open(os.path.join(folder, "Label", mask), "wb") as out:
                out.write(common.png_bytes(32, 32, 1, seed=100 + i))
            lines.append("%s,%s,1" % (image, mask))
        else:
            lines.append("%s,,0" % image)
    common.write_text(os.path.join(os.path.dirname(folder), "%s_list.csv" % name.lower()),
                      "\n".join(lines) + "\n")


def prepare(ctx):
    _split(ctx, "Train", 4)
    _split(ctx, "Test", 4)
    args = ["--unet_variant=tinyUNet", "--activation_fn=relu", "--exec_mode=train",
            "--iter_unit=batch", "--num_iter=2", "--batch_size=2", "--warmup_step=1",
            "--results_dir=" + ctx.out, "--data_dir=" + os.path.join(ctx.work, "data"),
            "--dataset_name=DAGM2007", "--dataset_classID=1", "--data_format=NHWC",
            "--use_auto_loss_scaling", "--nouse_tf_amp", "--nouse_xla", "--learning_rate=1e-4",
            "--loss_fn_name=adaptive_loss", "--weight_decay=1e-5",
            "--weight_init_method=he_uniform", "--augment_data", "--display_every=1", "--debug_verbosity=0"]
    pythonpath = [_REPO, os.path.join(ctx.model_dir, "dllogger")]
    if os.environ.get("PYTHONPATH"):
        pythonpath.append(os.environ["PYTHONPATH"])
    return args, {"PYTHONPATH": os.pathsep.join(pythonpath)}
