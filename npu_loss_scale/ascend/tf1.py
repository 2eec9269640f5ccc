"""TF1 mode of ``python -m npu_loss_scale.emulate --tf1``: the user's ``tensorflow`` is TF 1.x.

Ascend's TF adapter runs TensorFlow 1.15, and its users' scripts are TF1 code: ``tf.flags``,
``tf.app.run``, ``tf.logging``, ``tf.placeholder``, ``tf.Session``, subclasses of
``tf.train.Optimizer``. On TF 2.x those live in ``tf.compat.v1``. In TF1 mode:

* v2 behaviour is turned off (``tf.compat.v1.disable_v2_behavior()``: graph mode, v1 variables,
  v1 control flow), as in TF 1.15;
* ``import tensorflow as tf`` and ``from tensorflow import x`` *in the user's own files* (the
  script's folder and below) give ``tensorflow.compat.v1``; imports by this package, TensorFlow
  itself and third-party libraries are left alone (they get TF 2.x, which they need);
* ``import tensorflow.compat.v1 as tf`` keeps working;
* ``tf.contrib.*`` (gone in TF 2.x) gives the pieces the corpus uses most, mapped to TF 2.x (see
  :mod:`npu_loss_scale.ascend.tf1_contrib`: ``data.map_and_batch``, ``data.parallel_interleave``,
  ``data.AUTOTUNE``, ``layers.xavier_initializer``, ``layers.variance_scaling_initializer``,
  ``layers.l2_regularizer``, ``layers.layer_norm``, ``slim`` through ``tf_slim`` when installed);
  other names, and ``import tensorflow.contrib...`` statements, raise an error naming them.

* ``tensorflow.examples.tutorials.mnist.input_data`` reads the MNIST files a script points it at
  (:mod:`npu_loss_scale.ascend.tf1_mnist`).

What is not done yet: ``import tensorflow.contrib.x`` module paths, ``rnn``/``tpu``/``training``
contrib pieces, moved ``tensorflow.python.keras`` paths and TF 2.6 ``keras.*`` locations.
"""
import builtins
import os
import sys

_state = {}


def _is_user_file(path, roots):
    if not path:
        return False
    path = os.path.abspath(path)
    if any(part in path.split(os.sep) for part in ("site-packages", "dist-packages")):
        return False
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if path.startswith(package_dir + os.sep):
        return False
    return any(path == root or path.startswith(root + os.sep) for root in roots)


_CONTRIB = ("%s: tensorflow.contrib was removed in TensorFlow 2 and the TF1 mode of "
            "npu_loss_scale.emulate does not map it yet")


_MNIST_PACKAGES = ("tensorflow.examples", "tensorflow.examples.tutorials",
                   "tensorflow.examples.tutorials.mnist")
_MNIST_MODULE = "tensorflow.examples.tutorials.mnist.input_data"


class _ContribFinder:
    """Last on meta_path, for TF 1.15 modules TF 2.x lacks: ``tensorflow.contrib`` is named as
    not mapped; ``tensorflow.examples.tutorials.mnist.input_data`` is
    :mod:`npu_loss_scale.ascend.tf1_mnist` (a real one, found first, wins)."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):  # pylint: disable=unused-argument
        import importlib.machinery  # pylint: disable=import-outside-toplevel
        if fullname == "tensorflow.contrib" or fullname.startswith("tensorflow.contrib."):
            raise ModuleNotFoundError(_CONTRIB % fullname, name=fullname)
        if fullname in _MNIST_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, _MnistLoader(), is_package=True)
        if fullname == _MNIST_MODULE:
            return importlib.machinery.ModuleSpec(fullname, _MnistLoader())
        return None


class _MnistLoader:
    @staticmethod
    def create_module(spec):
        if spec.name == _MNIST_MODULE:
            from . import tf1_mnist  # pylint: disable=import-outside-toplevel
            return tf1_mnist
        return None

    @staticmethod
    def exec_module(module):
        if module.__name__ != _MNIST_MODULE and not hasattr(module, "__path__"):
            module.__path__ = []


def enable(user_roots):
    """Turns TF1 mode on for files under ``user_roots`` (idempotent)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    roots = [os.path.abspath(r) for r in user_roots]
    tf.compat.v1.disable_v2_behavior()
    v1 = tf.compat.v1
    if not hasattr(v1, "contrib"):
        from .tf1_contrib import contrib  # pylint: disable=import-outside-toplevel
        v1.contrib = contrib()  # only code that already runs as TF1 reaches tf.compat.v1.contrib
    if "import" in _state:
        _state["roots"][:] = roots
        return
    original = builtins.__import__
    _state["roots"] = roots

    def tf1_import(name, globals=None, locals=None, fromlist=(), level=0):  # pylint: disable=redefined-builtin
        try:
            module = original(name, globals, locals, fromlist, level)
        except ModuleNotFoundError as err:
            if level == 0 and name.startswith("tensorflow.contrib"):
                raise ModuleNotFoundError(_CONTRIB % name, name=name) from err
            raise
        if level == 0 and name == "tensorflow" and globals is not None \
                and _is_user_file(globals.get("__file__"), _state["roots"]):
            return v1
        return module

    builtins.__import__ = tf1_import
    _state["import"] = (original, tf1_import)
    finder = _ContribFinder()
    sys.meta_path.append(finder)
    _state["finder"] = finder


def disable():
    """Undoes :func:`enable` (the v2-behaviour switch stays as it is)."""
    if "import" in _state:
        original, ours = _state.pop("import")
        if builtins.__import__ is ours:
            builtins.__import__ = original
    finder = _state.pop("finder", None)
    if finder is not None:
        sys.meta_path[:] = [f for f in sys.meta_path if f is not finder]
