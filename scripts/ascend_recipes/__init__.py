"""Per-model recipes for ``scripts/try_ascend_scripts.py``: what a real script needs to run.

A generic run gives every script the same small arguments and the same synthetic MNIST/CIFAR-10
files; most real scripts want more: a task name, a vocabulary, TFRecords with their own
features, a list file of images. A *recipe* is what a user of such a script would write for
its CI: the arguments and a tiny synthetic dataset *in the format the script reads*. A recipe
never changes the script, never turns loss scaling or mixed precision off, and writes only
under its own work folder.

One module per model directory, named freely (``bert_google_finetune.py``), with:

``MODEL_DIR``
    the model directory, relative to the corpus root, as ``try_ascend_scripts.py`` prints it.
``ENTRY`` (optional)
    the entry script relative to ``MODEL_DIR`` when it is not the one chosen by the generic rule.
``TF1`` (optional)
    ``True``/``False`` to force ``--tf1`` on or off (default: the generic rule).
``prepare(ctx)``
    writes the synthetic data under ``ctx.work`` and returns ``(args, env)``: the script's
    command-line arguments (a list of strings; ``ctx.generic_args`` holds the generic ones, to
    extend or replace) and extra environment variables (a dict, may be empty). A
    ``PYTHONPATH`` there (folders of the model its launcher puts on the path) comes after the
    package under test, which stays first.
``TIMEOUT`` (optional)
    seconds this script gets at least (a longer ``--timeout`` wins): for scripts whose steps
    take minutes on a CPU at the sizes they fix themselves, or that train until stopped.
``CWD`` (optional)
    ``"work"`` to run the script from ``ctx.work`` instead of its own folder (for scripts that
    read or write relative paths).
``FIXED_PATHS`` (optional)
    ``{absolute path the script reads: folder under ctx.work}`` for scripts that read data from a
    path written into their code: the script runs in a private mount namespace where that path
    shows the folder (``try_ascend_scripts.in_mount_namespace``; root and ``unshare`` needed).
    Nothing is written outside the work folder.
``MODEL_COPY`` (optional)
    ``True`` for scripts that write into their own model directory (a build step's extension
    modules, outputs under the model's root): the runner copies the model directory to
    ``ctx.model_copy`` (under ``ctx.work``) before ``prepare``, and the script runs in a private
    mount namespace where the model directory shows that copy. The corpus is never written.

``ctx`` has ``work`` (an empty folder for this run), ``data`` (the generic synthetic folder),
``out`` (an empty output folder), ``model_dir`` and ``script`` (absolute paths),
``generic_args``, ``corpus`` (the corpus root: Ascend's tools that users copy next to their
code, such as ``precision_tool``, are found in other model directories there; see
:func:`precision_tool_dir`), ``python`` (the interpreter the script runs with) and
``model_copy`` (see ``MODEL_COPY``; else None); ``ctx.run_python(args, cwd)`` runs a model's
own build step with that interpreter and the package under test importable. Helpers below
write the formats several recipes share.
"""
import importlib.util
import os
import random
import shutil
import struct
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def load_recipes(folder=HERE):
    """{model dir relative to the corpus: recipe module} for every recipe module in ``folder``."""
    recipes = {}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py") or name.startswith("_"):
            continue
        path = os.path.join(folder, name)
        spec = importlib.util.spec_from_file_location("ascend_recipe_" + name[:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model_dir = getattr(module, "MODEL_DIR", None)
        if not model_dir or not callable(getattr(module, "prepare", None)):
            raise ValueError("recipe %s must define MODEL_DIR and prepare(ctx); it defines %s"
                             % (path, sorted(n for n in vars(module) if not n.startswith("_"))))
        model_dir = model_dir.strip("/")
        if model_dir in recipes:
            raise ValueError("two recipes for %s: %s and %s"
                             % (model_dir, recipes[model_dir].__file__, path))
        recipes[model_dir] = module
    return recipes


class Context:  # pylint: disable=too-few-public-methods
    """What a recipe's ``prepare`` gets (see the module docstring)."""

    def __init__(self, work, data, out, model_dir, script, generic_args, corpus=None,
                 python=None, package_root=None):
        self.work, self.data, self.out = work, data, out
        self.model_dir, self.script, self.generic_args = model_dir, script, list(generic_args)
        self.corpus, self.python, self.package_root = corpus, python, package_root
        self.model_copy = None

    def copy_model(self):
        """Copies the model directory to ``<work>/model`` (compiled Python left out); returns and
        remembers the copy's path (``model_copy``)."""
        self.model_copy = os.path.join(self.work, "model")
        shutil.copytree(self.model_dir, self.model_copy,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return self.model_copy

    def run_python(self, args, cwd):
        """Runs ``python args`` (the script's interpreter, the package under test first on
        ``PYTHONPATH``) in ``cwd``; raises ``RuntimeError`` with its output's end if it fails."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [p for p in (self.package_root, env.get("PYTHONPATH")) if p])
        proc = subprocess.run([self.python or sys.executable] + list(args), cwd=cwd, env=env,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError("%s failed in %s (exit %d):\n%s"
                               % (" ".join(args), cwd, proc.returncode,
                                  (proc.stdout + proc.stderr)[-3000:]))
        return proc.stdout

    def path(self, *parts):
        """A path under the work folder, its parent folders created."""
        path = os.path.join(self.work, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path


def precision_tool_dir(corpus):
    """The corpus's first copy (sorted) of Ascend's precision-analysis tool, ``precision_tool``
    with ``config.py`` and ``tf_config.py``: a folder users copy next to their code, which some
    model directories import and do not ship."""
    found = []
    for folder, subdirs, files in os.walk(corpus):
        subdirs[:] = [d for d in subdirs if not d.startswith(".")]
        if os.path.basename(folder) == "precision_tool" and \
                {"config.py", "tf_config.py"} <= set(files):
            found.append(folder)
    if not found:
        raise FileNotFoundError("no precision_tool folder with config.py and tf_config.py under "
                                "%s: the script imports Ascend's precision tool" % corpus)
    return sorted(found)[0]


# -- formats several recipes share ------------------------------------------------------------------
def write_text(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def _crc32c(data):
    poly, crc = 0x82F63B78, 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (poly & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def _masked_crc(data):
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecord(path, records):
    """Write serialized records (bytes) as a TFRecord file (no TensorFlow needed)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as out:
        for record in records:
            length = struct.pack("<Q", len(record))
            out.write(length + struct.pack("<I", _masked_crc(length)))
            out.write(record + struct.pack("<I", _masked_crc(record)))
    return path


def tf_example(features):
    """A serialized ``tf.train.Example``: ``features`` maps names to lists of int, float or
    bytes (the list's first element decides the kind)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    feature = {}
    for name, values in features.items():
        values = list(values)
        if values and isinstance(values[0], bytes):
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        elif values and isinstance(values[0], float):
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def png_bytes(height, width, channels=3, seed=0):
    """An encoded PNG of random pixels (8-bit; 1, 3 or 4 channels), written without libraries."""
    rng = random.Random(seed)
    kind = {1: 0, 3: 2, 4: 6}[channels]
    rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(width * channels))
                    for _ in range(height))

    def chunk(tag, body):
        return (struct.pack(">I", len(body)) + tag + body
                + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, kind,
                                                             0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def jpeg_bytes(height, width, seed=0):
    """An encoded JPEG of random pixels (needs TensorFlow)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    pixels = np.random.RandomState(seed).randint(0, 256, (height, width, 3)).astype(np.uint8)
    if tf.executing_eagerly():
        return tf.io.encode_jpeg(pixels).numpy()
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        return session.run(tf.io.encode_jpeg(pixels))  # TensorFlow 1.x runs recipes in graph mode


def png_label_records(count, seed, size=32):
    """Serialized examples of ``image`` (an encoded PNG, size x size x 3) and ``label`` (int64,
    0-9): the record layout of MixMatch-style semi-supervised CIFAR-10 splits."""
    return [tf_example({"image": [png_bytes(size, size, 3, seed=seed + i)],
                        "label": [(seed + i) % 10]}) for i in range(count)]


def frame_sequence_dump(ctx, folder, drive, height, width, frames, intrinsics):
    """A KITTI-style sequence dump as SfMLearner-derived scripts read it: per frame a JPEG of
    three frames side by side (``height`` x 3*``width``) and a ``_cam.txt`` with the 3x3
    intrinsics, and ``train.txt`` listing ``<drive> <frame>``. Returns the dump's folder."""
    root = ctx.path(folder, "train.txt")[:-len("train.txt")]
    lines = []
    for i in range(frames):
        frame = "%010d" % i
        with open(ctx.path(folder, drive, frame + ".jpg"), "wb") as out:
            out.write(jpeg_bytes(height, 3 * width, seed=i))
        write_text(ctx.path(folder, drive, frame + "_cam.txt"), intrinsics + "\n")
        lines.append("%s %s" % (drive, frame))
    write_text(root + "train.txt", "\n".join(lines) + "\n")
    return root


def bert_vocab(path, extra=()):
    """A small WordPiece vocabulary with BERT's special tokens, letters and a few words."""
    words = ["[PAD]"] + ["[unused%d]" % i for i in range(10)] + \
        ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'") + \
        ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + \
        ["the", "a", "is", "of", "and", "to", "in", "it", "good", "bad", "movie", "film"] + list(extra)
    return write_text(path, "\n".join(words) + "\n")


def tiny_bert_config(path, vocab_size, **overrides):
    """A BERT config JSON small enough for a CPU step in a second."""
    import json  # pylint: disable=import-outside-toplevel
    config = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
              "intermediate_size": 64, "max_position_embeddings": 128, "num_attention_heads": 2,
              "num_hidden_layers": 2, "type_vocab_size": 2, "vocab_size": vocab_size}
    config.update(overrides)
    return write_text(path, json.dumps(config, indent=1))
