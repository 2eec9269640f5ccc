"""TensorFlow names TF 2.x moved out of ``tensorflow.python.framework.ops``, ``control_flow_ops``
and ``layers.normalization``, put back for user files (and ``tf_slim``)."""

from npu_loss_scale.ascend.tf1.keras_paths import _PathProxy


_state = {}  # caches


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


__all__ = []
