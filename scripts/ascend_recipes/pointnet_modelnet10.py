"""PointNet (TF2, ``pointnet.py``): Keras ``fit`` through ``npu_device``'s
``NpuLossScaleOptimizer`` on ModelNet10 meshes.

The script lists ``<data_path>/ModelNet10/<class>/{train,test}/*`` (every top-level entry but
``README*``-like names is a class), loads each file with ``trimesh.load`` and samples 2048 points
on its surface. The recipe writes that folder with ModelNet10's ten class names and its
``README.txt``: per class two train meshes and one test mesh, each a valid OFF file of a closed
box (8 vertices, 12 triangles) with random sizes and a random offset. 20 train clouds at batch 4
give 5 steps in the one epoch, then the validation pass over the 10 test clouds.
``precision_mode`` stays the script's default, ``allow_mix_precision``.

It saves its weights to ``pointnet`` under the working folder: it runs from the recipe's work
folder. It imports ``npu_convert_dropout``, whose ``npu_ops.py`` takes
``drop_out_gen_mask``/``drop_out_do_mask`` from ``npu_device.gen_npu_ops``.
"""
import os
import random

from ascend_recipes import write_text

MODEL_DIR = "TensorFlow2/built-in/cv/image_classification/pointnet_ID2531_for_TensorFlow2.X"
ENTRY = "pointnet.py"
TF1 = False
CWD = "work"

CLASSES = ("bathtub", "bed", "chair", "desk", "dresser", "monitor", "night_stand", "sofa",
           "table", "toilet")
# the 12 triangles of a box whose corner i has coordinates ((i >> 2) & 1, (i >> 1) & 1, i & 1)
_BOX_FACES = ((0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5), (0, 4, 5), (0, 5, 1),
              (2, 3, 7), (2, 7, 6), (0, 2, 6), (0, 6, 4), (1, 5, 7), (1, 7, 3))


def box_off(rng):
    """The text of an OFF mesh: a closed box with random sides and offset."""
    size = [rng.uniform(5.0, 40.0) for _ in range(3)]
    offset = [rng.uniform(-10.0, 10.0) for _ in range(3)]
    lines = ["OFF", "8 12 0"]
    for i in range(8):
        corner = ((i >> 2) & 1, (i >> 1) & 1, i & 1)
        lines.append(" ".join("%.6f" % (offset[k] + corner[k] * size[k]) for k in range(3)))
    lines += ["3 %d %d %d" % face for face in _BOX_FACES]
    return "\n".join(lines) + "\n"


def write_modelnet10(root, train=2, test=1, seed=0):
    """``root/ModelNet10`` in ModelNet10's layout (class/train|test/<class>_<n>.off)."""
    rng = random.Random(seed)
    base = os.path.join(root, "ModelNet10")
    write_text(os.path.join(base, "README.txt"), "Tiny synthetic ModelNet10-shaped meshes.\n")
    number = 0
    for name in CLASSES:
        for split, count in (("train", train), ("test", test)):
            for _ in range(count):
                number += 1
                write_text(os.path.join(base, name, split, "%s_%04d.off" % (name, number)),
                           box_off(rng))
    return root


def prepare(ctx):
    data = write_modelnet10(os.path.join(ctx.work, "data"))
    return ["--data_path=" + data, "--batch_size=4", "--epochs=1"], {}
