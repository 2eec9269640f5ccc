"""TF1 mode of ``python -m npu_loss_scale.emulate --tf1``: the user's ``tensorflow`` is TF 1.x.

Ascend's TF adapter runs TensorFlow 1.15, and its users' scripts are TF1 code: ``tf.flags``,
``tf.app.run``, ``tf.logging``, ``tf.placeholder``, ``tf.Session``, subclasses of
``tf.train.Optimizer``. On TF 2.x those live in ``tf.compat.v1``. In TF1 mode:

* v2 behaviour is turned off (``tf.compat.v1.disable_v2_behavior()``: graph mode, v1 variables,
  v1 control flow), as in TF 1.15;
* ``import tensorflow as tf`` and ``from tensorflow import x`` *in the user's own files* (the
  script's folder and below, and any other file that is not installed code: outside
  site-packages/dist-packages, Python's standard library and folders holding a package's install
  metadata, as a model's sibling folders put on ``sys.path`` are) give ``tensorflow.compat.v1``; imports by this package, TensorFlow itself and
  installed third-party libraries are left alone (they get TF 2.x, which they need);
* ``import tensorflow.compat.v1 as tf`` keeps working;
* ``tf.contrib.*`` (gone in TF 2.x) gives the pieces the corpus uses most, mapped to TF 2.x (see
  :mod:`npu_loss_scale.ascend.tf1_contrib`: ``data.map_and_batch``, ``data.parallel_interleave``,
  ``data.AUTOTUNE``, ``layers.xavier_initializer``, ``layers.variance_scaling_initializer``,
  ``layers.l2_regularizer``, ``layers.layer_norm``, ``slim`` through ``tf_slim`` when installed);
  other names raise an error naming them. ``import tensorflow.contrib.x`` and ``from
  tensorflow.contrib.x import y`` in user files resolve through
  :func:`npu_loss_scale.ascend.tf1_contrib.resolve_module` (``slim`` and its ``nets``, the
  ``layers``/``framework`` internals through ``tf_slim``, Ascend's old
  ``tensorflow.contrib.offline_train`` adapter location through ``npu_bridge``); an unmapped
  module path raises ModuleNotFoundError naming it;
* ``tensorflow_core`` (the package TF 1.15 installs ``tensorflow`` from) is ``tensorflow`` in
  user files;

* ``tensorflow.examples.tutorials.mnist.input_data`` reads the MNIST files a script points it at
  (:mod:`npu_loss_scale.ascend.tf1_mnist`).

* Keras module paths that moved (:func:`moved_keras_module`): ``tensorflow.python.keras.*`` (TF
  1.15's ``tf.keras``) and, on Keras 2.13 to 2.15, TF 2.6 ``keras.*`` locations such as
  ``keras.layers.core`` resolve to the modules of the installed ``tf.keras`` when it is Keras 2;
* ``tensorflow.python.framework.ops`` and ``tensorflow.python.ops.control_flow_ops`` in user
  files also have the TF 1.15 names TF 2.x moved out of them (``ops.Tensor``,
  ``ops.IndexedSlices``, ``ops.register_tensor_conversion_function``...;
  ``control_flow_ops.cond``, ``case``, ``while_loop``, ``Assert``, the v1 functions), and
  ``tensorflow.python.layers.normalization`` has ``tf.compat.v1.layers``' batch norm when
  TensorFlow would load it from the absent ``tf_keras``; so they have in ``tf_slim``, the
  library ``tf.contrib.slim``/``layers`` map to, whose 1.1.0 release still reads
  ``ops.Tensor``, ``control_flow_ops.cond`` and ``normalization.BatchNormalization``.

* TF 2.4 names later TensorFlow dropped (``Graph._last_id``,
  ``tf.keras.mixed_precision.experimental``): :mod:`npu_loss_scale.ascend.tf24`, in TF1 mode
  and for TF2 scripts alike.

What is not done yet: most of ``learn``, ``quantize``, ``opt`` contrib pieces, ``image`` beyond
``transform``/``translate``/``rotate``, ``distributions`` beyond ``percentile``.
"""
import builtins
import os
import sys
# imported here, before the import hooks exist: imported from inside a hook while the standard
# library's own sysconfig is being imported (Python 3.7 and 3.9 import it late), it is
# half-initialised
import sysconfig  # noqa: F401  pylint: disable=unused-import

from npu_loss_scale.ascend.tf1.contrib_imports import _CONTRIB, _ContribFinder, _import_contrib
from npu_loss_scale.ascend.tf1.keras_paths import (  # noqa: F401  (moved_keras_module: public)
    _import_keras_path, _is_keras_path, moved_keras_module)
from npu_loss_scale.ascend.tf1.moved_names import _import_with_moved_names, _is_tf_slim
from npu_loss_scale.ascend.tf1.user_files import _is_user_file

_state = {}  # the import hooks in force and the user roots they serve


def enable_keras_paths(user_roots):
    """For scripts run without TF1 mode (TF2 scripts): only the moved Keras module paths of
    :func:`moved_keras_module` and the moved TensorFlow names and modules of
    :data:`.moved_names._MOVED_NAMES` (``ops.Tensor``, ``distribution_strategy_context``, ...) resolve, in
    files under ``user_roots`` (idempotent; TF1 mode, which does this too, takes precedence);
    the TF 2.4 names of :mod:`.tf24` are added."""
    from npu_loss_scale.ascend import tf24  # pylint: disable=import-outside-toplevel
    tf24.enable()
    roots = [os.path.abspath(r) for r in user_roots]
    if "import" in _state or "keras_import" in _state:
        _state["roots"][:] = roots
        return
    original = builtins.__import__
    _state["roots"] = roots

    def keras_paths_import(name, globals=None, locals=None, fromlist=(), level=0):  # pylint: disable=redefined-builtin
        if level == 0 and globals is not None \
                and _is_user_file(globals.get("__file__"), _state["roots"]):
            module = _import_with_moved_names(original, name, globals, locals, fromlist)
            if module is not None:
                return module
            if _is_keras_path(name):
                return _import_keras_path(original, name, globals, locals, fromlist)
        return original(name, globals, locals, fromlist, level)

    builtins.__import__ = keras_paths_import
    _state["keras_import"] = (original, keras_paths_import)


def enable(user_roots):
    """Turns TF1 mode on for files under ``user_roots`` (idempotent)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    roots = [os.path.abspath(r) for r in user_roots]
    tf.compat.v1.disable_v2_behavior()
    from npu_loss_scale.ascend import tf24  # pylint: disable=import-outside-toplevel
    tf24.enable()
    v1 = tf.compat.v1
    if not hasattr(v1, "contrib"):
        from npu_loss_scale.ascend.tf1_contrib import (  # pylint: disable=import-outside-toplevel
            contrib)
        v1.contrib = contrib()  # only code that already runs as TF1 reaches tf.compat.v1.contrib
    if "import" in _state:
        _state["roots"][:] = roots
        return
    original = builtins.__import__
    _state["roots"] = roots

    def tf1_import(name, globals=None, locals=None, fromlist=(), level=0):  # pylint: disable=redefined-builtin
        user = level == 0 and globals is not None \
            and _is_user_file(globals.get("__file__"), _state["roots"])
        if user and (name == "tensorflow_core" or name.startswith("tensorflow_core.")):
            name = "tensorflow" + name[len("tensorflow_core"):]  # TF 1.15's real package name
        if user and (name == "tensorflow.contrib" or name.startswith("tensorflow.contrib.")):
            return _import_contrib(v1, name, fromlist)
        if level == 0 and (user or _is_tf_slim(globals)):
            module = _import_with_moved_names(original, name, globals, locals, fromlist)
            if module is not None:
                return module
        if user and _is_keras_path(name):
            return _import_keras_path(original, name, globals, locals, fromlist)
        try:
            module = original(name, globals, locals, fromlist, level)
        except ModuleNotFoundError as err:
            if level == 0 and name.startswith("tensorflow.contrib"):
                raise ModuleNotFoundError(_CONTRIB % name, name=name) from err
            raise
        if user and name == "tensorflow":
            return v1
        return module

    builtins.__import__ = tf1_import
    _state["import"] = (original, tf1_import)
    finder = _ContribFinder()
    sys.meta_path.append(finder)
    _state["finder"] = finder


def disable():
    """Undoes :func:`enable` and :func:`enable_keras_paths` (the v2-behaviour switch stays as
    it is)."""
    for key in ("import", "keras_import"):
        if key in _state:
            original, ours = _state.pop(key)
            if builtins.__import__ is ours:
                builtins.__import__ = original
    finder = _state.pop("finder", None)
    if finder is not None:
        sys.meta_path[:] = [f for f in sys.meta_path if f is not finder]


__all__ = ["moved_keras_module", "enable_keras_paths", "enable", "disable"]
