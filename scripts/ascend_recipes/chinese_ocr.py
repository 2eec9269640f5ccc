"""CHINESE-OCR (contrib/nlp, CTPN text detection in ``ctpn/train_net.py``): Pascal VOC 2007 data.

The script runs from ``ctpn/`` (it reads ``text.yml`` there), takes no arguments, and trains
``VGGnet_train`` for a fixed 40000 iterations (one image each, rescaled to 600 pixels), a
snapshot every 100: it trains until stopped. What it expects of its machine, given as a user of
it would (the script is not changed):

* the model's build step, ``lib/utils/make-for-cpu.sh``, run in the model's folder: ``cython`` on
  ``bbox.pyx`` and ``cython_nms.pyx``, then ``setup_cpu.py build_ext --inplace`` (which imports
  ``npu_bridge``: run here through ``python -m npu_loss_scale.emulate``) and the move of the
  built modules into ``lib/utils``. Until it has run, ``lib/utils/bbox.py`` and
  ``cython_nms.py`` (Cython source under ``.py`` names) stop the import with a ``SyntaxError``;
  after it, Python imports the extension modules first. Outputs go under the model's root too,
  so the recipe works on a copy of the model directory (``MODEL_COPY``);
* ``lib/fast_rcnn/train.py`` imports ``lib.precision_tool.tf_config``: Ascend's precision tool,
  which users copy into ``lib/``; the copy another model directory of the corpus ships goes
  there;
* the data at the fixed ``/home/test_user04/ctpn/``: ``VOCdevkit2007/VOC2007`` (``JPEGImages``,
  ``Annotations`` with ``text`` boxes, ``ImageSets/Main/trainval.txt``) and
  ``VGG_imagenet.npy`` (a pickled ``{layer: {"weights", "biases"}}`` of VGG-16's convolutions):
  ``FIXED_PATHS`` shows the recipe's three images and random weights there.
"""
import os
import shutil

from ascend_recipes import jpeg_bytes, precision_tool_dir, write_text

MODEL_DIR = "TensorFlow/contrib/nlp/CHINESE-OCR_ID2090_for_Tensorflow"
ENTRY = "ctpn/train_net.py"
TF1 = True
MODEL_COPY = True
FIXED_PATHS = {"/home/test_user04/ctpn": "ctpn_home"}
TIMEOUT = 300

_IMAGES = 3

_VGG16 = (("conv1", 2, 3, 64), ("conv2", 2, 64, 128), ("conv3", 3, 128, 256),
          ("conv4", 3, 256, 512), ("conv5", 3, 512, 512))

# Written by the script's own interpreter: a pickle of NumPy arrays loads only in the NumPy
# that wrote it, or an older one for the same major version.
_WRITE_VGG = """
import sys
import numpy as np
layers, path = eval(sys.argv[1]), sys.argv[2]
rng = np.random.RandomState(0)
weights = {}
for block, repeat, cin, cout in layers:
    for i in range(1, repeat + 1):
        fan_in = cin if i == 1 else cout
        weights["%s_%d" % (block, i)] = {
            "weights": rng.normal(0, (2.0 / (9 * fan_in)) ** 0.5,
                                  (3, 3, fan_in, cout)).astype("float32"),
            "biases": np.zeros(cout, "float32")}
np.save(path, weights)
"""

_ANNOTATION = """<annotation>
  <filename>{name}.jpg</filename>
  <size><width>{width}</width><height>{height}</height><depth>3</depth></size>
{objects}</annotation>
"""

_OBJECT = """  <object><name>text</name><difficult>0</difficult>
    <bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin><xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox>
  </object>
"""


def _build(ctx, utils):
    """The model's ``make-for-cpu.sh``, step by step, in ``utils`` (``lib/utils`` of the copy)."""
    for source in ("bbox.pyx", "cython_nms.pyx"):
        ctx.run_python(["-m", "cython", source], utils)
    ctx.run_python(["-m", "npu_loss_scale.emulate", "setup_cpu.py", "build_ext", "--inplace"],
                   utils)
    built = os.path.join(utils, "utils")
    for name in os.listdir(built):
        shutil.move(os.path.join(built, name), os.path.join(utils, name))
    shutil.rmtree(built)
    shutil.rmtree(os.path.join(utils, "build"), ignore_errors=True)


def _voc(ctx, width=240, height=160):
    """Three images with 16-pixel-wide text boxes (CTPN's split labels) in VOC 2007's layout,
    under ``ctpn_home/VOCdevkit2007/VOC2007`` of the work folder."""
    voc = ("ctpn_home", "VOCdevkit2007", "VOC2007")
    names = []
    for i in range(_IMAGES):
        name = "img_%d" % i
        names.append(name)
        with open(ctx.path(*voc, "JPEGImages", name + ".jpg"), "wb") as out:
            out.write(jpeg_bytes(height, width, seed=i))
        top = 40 + 10 * i
        objects = "".join(_OBJECT.format(x1=x, y1=top, x2=x + 15, y2=top + 30)
                          for x in range(48, 176, 16))
        write_text(ctx.path(*voc, "Annotations", name + ".xml"),
                   _ANNOTATION.format(name=name, width=width, height=height, objects=objects))
    write_text(ctx.path(*voc, "ImageSets", "Main", "trainval.txt"), "\n".join(names) + "\n")


def prepare(ctx):
    copy = ctx.model_copy
    shutil.copytree(precision_tool_dir(ctx.corpus), os.path.join(copy, "lib", "precision_tool"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _build(ctx, os.path.join(copy, "lib", "utils"))
    _voc(ctx)
    ctx.run_python(["-c", _WRITE_VGG, repr(_VGG16), ctx.path("ctpn_home", "VGG_imagenet.npy")],
                   ctx.work)
    return [], {}
