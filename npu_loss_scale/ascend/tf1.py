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
import sysconfig

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
    if any(path == root or path.startswith(root + os.sep) for root in roots):
        return True
    # a model's other folders (``sys.path.append("../nets")``): any file that is not installed
    # code — neither in site-packages/dist-packages (above) nor in Python's standard library,
    # nor beside a ``*.dist-info``/``*.egg-info`` (``pip install --target``, ``PYTHONPATH``)
    if any(path.startswith(lib + os.sep) for lib in _installed_roots()):
        return False
    folder = os.path.dirname(path)
    for _ in range(8):
        if _has_install_metadata(folder):
            return False
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return True


def _has_install_metadata(folder):
    cache = _state.setdefault("metadata", {})
    if folder not in cache:
        try:
            cache[folder] = any(n.endswith((".dist-info", ".egg-info")) for n in os.listdir(folder))
        except OSError:
            cache[folder] = False
    return cache[folder]


def _installed_roots():
    if "installed" not in _state:
        libs = set()
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            try:
                libs.add(os.path.abspath(sysconfig.get_path(key)))
            except (KeyError, TypeError):
                pass
        for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
            libs.add(os.path.abspath(os.path.join(prefix, "lib")))
            libs.add(os.path.abspath(os.path.join(prefix, "lib64")))
        _state["installed"] = sorted(libs)
    return _state["installed"]


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
            from npu_loss_scale.ascend import tf1_mnist  # pylint: disable=import-outside-toplevel
            return tf1_mnist
        return None

    @staticmethod
    def exec_module(module):
        if module.__name__ != _MNIST_MODULE and not hasattr(module, "__path__"):
            module.__path__ = []


def _import_contrib(v1, name, fromlist):
    """``import``/``from ... import`` of a ``tensorflow.contrib`` module path in user code."""
    from npu_loss_scale.ascend.tf1_contrib import resolve_module  # pylint: disable=import-outside-toplevel
    module = resolve_module(name, v1.contrib)
    if not fromlist:
        return v1  # `import tensorflow.contrib.x as y` then takes attributes from the top package
    for item in fromlist:
        if item != "*" and not hasattr(module, item):
            try:  # a submodule: importing it makes it an attribute of its package
                resolve_module(name + "." + item, v1.contrib)
            except ModuleNotFoundError as err:
                if hasattr(module, item):
                    continue
                raise ImportError("cannot import name %r from %s: %s.%s is not mapped to "
                                  "TensorFlow 2 by the TF1 mode of npu_loss_scale.emulate"
                                  % (item, name, name, item), name=name) from err
    return module


_TF_KERAS = "tensorflow.python.keras"


def _keras_2_package():
    """Where the installed Keras 2 keeps its modules (``keras.src`` or ``keras``), or None
    (:func:`npu_loss_scale._internal.compat.keras.keras2_source_package`); asked once."""
    if "keras_package" not in _state:
        try:
            from npu_loss_scale._internal.compat import keras as compat_keras  # pylint: disable=import-outside-toplevel
            _state["keras_package"] = compat_keras.keras2_source_package()
        except ImportError:
            _state["keras_package"] = None
    return _state["keras_package"]


def moved_keras_module(name):
    """Where a Keras module path of TF 1.15 or TF 2.6 lives now, or None to import as is.

    * ``tensorflow.python.keras[.x]`` (and TF 1.4's ``tensorflow.python.keras._impl.keras[.x]``)
      is ``tf.keras`` in TF 1.15; in TF 2.6 to 2.15 TensorFlow still ships that folder, but as a
      separate, frozen copy of Keras whose layers do not mix with ``tf.keras`` models, so it maps
      to the modules ``tf.keras`` is made of: ``keras.src[.x]`` (Keras 2.13 to 2.15) or
      ``keras[.x]`` (Keras 2.6);
    * on Keras 2.13 to 2.15, ``keras.x`` where TF 2.6's Keras had a module
      (``keras.layers.core``, ``keras.backend_config``, ``keras.utils.control_flow_util``,
      ``keras.engine``, ...) and the installed Keras has it under ``keras.src.x`` (tried only when
      ``keras.x`` is missing); ``keras.optimizer_v2[.x]`` (TF 2.6's optimizers) under
      ``keras.src.optimizers.legacy``, its ``utils`` and ``learning_rate_schedule`` where Keras
      2.15 keeps them. On Keras 2.6 those paths are where they were.

    With Keras 3 (TF 2.16 and later) nothing is mapped: its modules are laid out differently.
    """
    package = _keras_2_package()
    if package is None:
        return None
    if name == _TF_KERAS or name.startswith(_TF_KERAS + "."):
        rest = name[len(_TF_KERAS):]
        if rest == "._impl.keras" or rest.startswith("._impl.keras."):
            rest = rest[len("._impl.keras"):]
        return package + rest
    if package != "keras.src":
        return None
    if name.startswith("keras.") and not name.startswith("keras.src."):
        if name in _KERAS_RELOCATED:
            return _KERAS_RELOCATED[name]
        for old, new in _KERAS_RELOCATED.items():
            if name.startswith(old + "."):
                return new + name[len(old):]
        return "keras.src" + name[len("keras"):]
    return None


# TF 2.6 Keras modules that Keras 2.13+ keeps elsewhere than under ``keras.src`` + the same path
# (the optimizers of TF 2.6, ``OptimizerV2``, are Keras 2.15's legacy ones): exact names first,
# then as prefixes
_KERAS_RELOCATED = {
    "keras.optimizer_v2.utils": "keras.src.optimizers.utils",
    "keras.optimizer_v2.learning_rate_schedule":
        "keras.src.optimizers.schedules.learning_rate_schedule",
    "keras.optimizer_v2": "keras.src.optimizers.legacy",
}


def _keras_fromlist(module, name, fromlist):
    """``from keras[.x] import y`` where ``y`` is a TF 2.6 module now at ``keras.src[.x].y``."""
    import importlib  # pylint: disable=import-outside-toplevel
    missing = [item for item in fromlist if item != "*" and not hasattr(module, item)]
    if not missing or moved_keras_module(name + "." + missing[0]) is None:
        return module
    value = module
    for item in missing:
        target = moved_keras_module(name + "." + item)
        try:
            importlib.import_module(target)
        except ImportError:
            continue
        value = _PathProxy(value, item, _moved_module(target))
    return value


class _PathProxy:
    """What ``import a.b.c`` binds ``a`` to when ``a.b.c`` was mapped elsewhere: ``a``'s
    attributes, except that the path ``.b.c`` leads to the mapped module."""

    def __init__(self, real, child, value):
        object.__setattr__(self, "_proxy", (real, child, value))

    def __getattr__(self, item):
        real, child, value = object.__getattribute__(self, "_proxy")
        if item == child:
            return value
        return getattr(real, item)

    def __repr__(self):
        real, _, _ = object.__getattribute__(self, "_proxy")
        return repr(real)


def _public_keras_package(target):
    """``keras.x`` (public) for ``keras.src.x[.y...]``: where TF 2.6's ``keras.x.y`` modules'
    public names are now (``keras.layers.normalization.BatchNormalization`` is
    ``keras.layers.BatchNormalization``)."""
    import importlib  # pylint: disable=import-outside-toplevel
    parts = target.split(".")
    if parts[:2] != ["keras", "src"] or len(parts) < 4:
        return None
    try:
        return importlib.import_module("keras." + parts[2])
    except ImportError:
        return None


def _moved_module(target):
    """Module ``target`` as user code sees it: its names, then those of its public package."""
    import importlib  # pylint: disable=import-outside-toplevel
    import types  # pylint: disable=import-outside-toplevel
    public = _public_keras_package(target)
    try:
        module = importlib.import_module(target)
    except ModuleNotFoundError as err:
        # a TF 2.6 module Keras 2.15 folded into others (keras.layers.advanced_activations):
        # its public names, from the public package
        if public is None or err.name != target:
            raise
        module = types.ModuleType(target)
    if public is None:
        return module
    cache = _state.setdefault("moved", {})
    if target not in cache:
        class _Moved(types.ModuleType):
            def __getattr__(self, item):
                try:
                    return getattr(module, item)
                except AttributeError:
                    if item.startswith("_"):
                        raise
                    return getattr(public, item)

        proxy = _Moved(target, module.__doc__)
        proxy.__file__ = getattr(module, "__file__", None)
        cache[target] = proxy
    return cache[target]


def _import_moved(original, name, target, globals_, locals_, fromlist):
    """``import``/``from ... import`` of ``name`` in user code, resolved to module ``target``."""
    import importlib  # pylint: disable=import-outside-toplevel
    module = _moved_module(target)
    if fromlist:
        if target in sys.modules:
            original(target, globals_, locals_, fromlist, 0)  # imports the submodules named
        if _is_keras_path(name):   # from keras.optimizer_v2 import utils: moved apart
            return _keras_fromlist(module, name, fromlist)
        return module
    parts = name.split(".")
    value = module
    for depth in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:depth])
        try:
            real = importlib.import_module(parent)
        except ImportError:
            real = None
        value = _PathProxy(real, parts[depth], value)
    return value


_OPS = "tensorflow.python.framework.ops"
# TF 1.15 names of TensorFlow's internal modules that TF 2.x moved to other modules, by module,
# then by the path under ``tensorflow`` of the same object today (``ops.Tensor`` is used by 18
# ModelZoo files; ``control_flow_ops.cond``, ``while_loop``, ``Assert`` by about 140, and tf-slim
# 1.1.0 itself calls ``control_flow_ops.cond``, moved to ``tensorflow.python.ops.cond`` in TF 2.14)
_MOVED_NAMES = {
    _OPS: {"Tensor": "Tensor", "IndexedSlices": "IndexedSlices",
           "IndexedSlicesValue": "IndexedSlicesValue",
           "register_tensor_conversion_function": "register_tensor_conversion_function",
           "convert_to_tensor_v2": "convert_to_tensor", "name_scope_v2": "name_scope",
           "convert_to_tensor_v2_with_dispatch": "convert_to_tensor"},
    # a module folded into distribute_lib in TF 2.14 (:data:`_MOVED_MODULES`)
    "tensorflow.python.distribute.distribution_strategy_context": {},
    # TF 1.15's control_flow_ops.cond/case/while_loop/Assert are the v1 functions
    "tensorflow.python.ops.control_flow_ops": {
        "cond": "compat.v1.cond", "case": "compat.v1.case", "while_loop": "compat.v1.while_loop",
        "Assert": "compat.v1.Assert"},
    # TF 1.15's tf.layers batch norm; TF 2.15 loads this module's names from the separate
    # tf_keras package, but tf.compat.v1.layers has the same classes from its own Keras 2
    # (tf-slim's batch_norm uses them unless updates_collections=None); with Keras 3 (no
    # tf.compat.v1.layers) the error stays TensorFlow's, naming tf_keras
    "tensorflow.python.layers.normalization": {
        "BatchNormalization": "compat.v1.layers.BatchNormalization",
        "BatchNorm": "compat.v1.layers.BatchNormalization",
        "batch_normalization": "compat.v1.layers.batch_normalization",
        "batch_norm": "compat.v1.layers.batch_normalization"},
}


# TF 1.15 / 2.4 internal modules TF 2.x removed, and the module that holds their names now
# (``distribution_strategy_context``: imported by 9 ModelZoo files; gone in TF 2.14)
_MOVED_MODULES = {
    "tensorflow.python.distribute.distribution_strategy_context":
        "tensorflow.python.distribute.distribute_lib",
}


def _real_module(name):
    """Module ``name``, or where its names are now when TensorFlow removed it."""
    import importlib  # pylint: disable=import-outside-toplevel
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if name not in _MOVED_MODULES or err.name != name:
            raise
        return importlib.import_module(_MOVED_MODULES[name])


def _module_with_moved_names(name):
    """Internal module ``name`` as user code sees it: TF 2.x's module plus the TF 1.15 names
    that moved out of it (:data:`_MOVED_NAMES`)."""
    cache = _state.setdefault("moved_names", {})
    if name not in cache:
        import importlib  # pylint: disable=import-outside-toplevel
        import types  # pylint: disable=import-outside-toplevel
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        real = _real_module(name)
        moved = _MOVED_NAMES[name]

        class _WithMovedNames(types.ModuleType):
            def __getattr__(self, item):
                try:
                    return getattr(real, item)
                except (AttributeError, ImportError) as err:
                    if item not in moved:
                        raise
                    error = err  # a lazy module of TF 2.x may raise ModuleNotFoundError
                value = tf
                try:
                    for part in moved[item].split("."):
                        value = getattr(value, part)
                except (AttributeError, ImportError):
                    # e.g. Keras 3 without tf_keras: no TF1 layers anywhere
                    raise AttributeError(
                        "%s.%s (TensorFlow 1.15) is not emulated with TensorFlow %s: its TF 2.x "
                        "counterpart tf.%s is missing too (%s: %s)"
                        % (name, item, tf.__version__, moved[item], type(error).__name__,
                           error)) from error
                return value

        proxy = _WithMovedNames(name, real.__doc__)
        proxy.__file__ = getattr(real, "__file__", None)
        cache[name] = proxy
    return cache[name]


def _is_tf_slim(globals_):
    """Whether the importing module is part of ``tf_slim``, which TF1 mode's ``tf.contrib.slim``
    and ``tf.contrib.layers`` are: tf-slim 1.1.0 still reads ``ops.Tensor`` and
    ``control_flow_ops.cond`` (gone in TF 2.14)."""
    return globals_ is not None and str(globals_.get("__name__", "")).startswith("tf_slim.")


def _import_with_moved_names(original, name, globals_, locals_, fromlist):
    """A module of :data:`_MOVED_NAMES` imported in user code (``import a.b.m``, ``from a.b.m
    import x``, ``from a.b import m``), or None when ``name`` is not one."""
    import importlib  # pylint: disable=import-outside-toplevel
    if name in _MOVED_NAMES:
        if name in _MOVED_MODULES:
            _real_module(name)
        else:
            original(name, globals_, locals_, fromlist, 0)
        value = _module_with_moved_names(name)
        if fromlist:
            return value
        parts = name.split(".")
        for depth in range(len(parts) - 1, 0, -1):
            value = _PathProxy(importlib.import_module(".".join(parts[:depth])), parts[depth],
                               value)
        return value
    if fromlist:
        wanted = [item for item in fromlist if name + "." + item in _MOVED_NAMES]
        if wanted:
            value = original(name, globals_, locals_, fromlist, 0)
            for item in wanted:
                value = _PathProxy(value, item, _module_with_moved_names(name + "." + item))
            return value
    return None


def _is_keras_path(name):
    return name in ("keras", _TF_KERAS) or name.startswith(("keras.", _TF_KERAS + "."))


def _import_keras_path(original, name, globals_, locals_, fromlist):
    """A user file's absolute import of a Keras module path (``keras[.x]``,
    ``tensorflow.python.keras[.x]``), resolved where it moved (:func:`moved_keras_module`)."""
    moved = moved_keras_module(name)
    if moved is not None and name.startswith(_TF_KERAS):
        try:
            return _import_moved(original, name, moved, globals_, locals_, fromlist)
        except ModuleNotFoundError:
            pass  # no counterpart in tf.keras: the frozen copy TensorFlow ships
    try:
        module = original(name, globals_, locals_, fromlist, 0)
    except ModuleNotFoundError as err:
        if moved is not None and err.name is not None and name.startswith(err.name):
            try:
                return _import_moved(original, name, moved, globals_, locals_, fromlist)
            except ModuleNotFoundError:
                pass
        raise
    if fromlist and name != _TF_KERAS and not name.startswith(_TF_KERAS + "."):
        return _keras_fromlist(module, name, fromlist)
    return module


def enable_keras_paths(user_roots):
    """For scripts run without TF1 mode (TF2 scripts): only the moved Keras module paths of
    :func:`moved_keras_module` and the moved TensorFlow names and modules of
    :data:`_MOVED_NAMES` (``ops.Tensor``, ``distribution_strategy_context``, ...) resolve, in
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
        from npu_loss_scale.ascend.tf1_contrib import contrib  # pylint: disable=import-outside-toplevel
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


__all__ = [
    "moved_keras_module", "enable_keras_paths", "enable", "disable",
]
