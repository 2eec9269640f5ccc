"""Keras module paths that moved: ``tensorflow.python.keras.*`` (TF 1.15's ``tf.keras``) and the TF
2.6 ``keras.*`` locations, resolved to the modules of the installed ``tf.keras``."""
import sys


_state = {}  # caches


_TF_KERAS = "tensorflow.python.keras"


def _keras_2_package():
    """Where the installed Keras 2 keeps its modules (``keras.src`` or ``keras``), or None
    (:func:`npu_loss_scale._internal.compat.keras.keras2_source_package`); asked once."""
    if "keras_package" not in _state:
        try:
            from npu_loss_scale._internal.compat import (  # pylint: disable=import-outside-toplevel
                keras as compat_keras)
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


__all__ = ["moved_keras_module"]
