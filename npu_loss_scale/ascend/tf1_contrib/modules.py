"""TF 1.15 module paths (``import tensorflow.contrib.slim as slim``) resolved to the namespaces of
this package, ``tf_slim`` modules, or the ``npu_bridge`` modules of the pre-``npu_bridge`` path."""
import importlib


from npu_loss_scale.ascend.tf1_contrib._namespace import _Namespace


_MODULE_PREFIXES = (  # (TF 1.15 module path prefix, module it resolves to), longest first
    ("tensorflow.contrib.slim.python.slim.nets", "tf_slim.nets"),
    ("tensorflow.contrib.slim.nets", "tf_slim.nets"),
    ("tensorflow.contrib.slim", "tf_slim"),
    ("tensorflow.contrib.layers.python.layers", "tf_slim.layers"),
    ("tensorflow.contrib.offline_train.python.npu_ops", "npu_bridge.estimator.npu_ops"),
    ("tensorflow.contrib.offline_train.python.npu", "npu_bridge.estimator.npu"),
    ("tensorflow.contrib.hccl.python.ops", "npu_bridge.hccl"),
)


_NOT_MAPPED = ("%s: tensorflow.contrib was removed in TensorFlow 2 and the TF1 mode of "
               "npu_loss_scale.emulate does not map this module")


def resolve_module(fullname, namespace):
    """The object standing for TF 1.15 module ``fullname`` (``tensorflow.contrib...``).

    ``namespace`` is the ``tf.contrib`` object handed to user code. Raises ModuleNotFoundError
    naming the module when it is not mapped (or its ``tf_slim`` target is not installed).
    """
    parts = fullname.split(".")
    if parts[:2] == ["tensorflow", "contrib"]:
        obj = namespace
        for i, part in enumerate(parts[2:], 2):
            if not isinstance(obj, _Namespace) or part not in vars(obj):
                break
            obj = getattr(obj, part)
        else:
            return obj
    for prefix, target in _MODULE_PREFIXES:
        if fullname == prefix or fullname.startswith(prefix + "."):
            name = target + fullname[len(prefix):]
            try:
                return importlib.import_module(name)
            except ModuleNotFoundError as err:
                if target.startswith("tf_slim") and err.name == "tf_slim":
                    raise ModuleNotFoundError(
                        "%s maps to %s, from the tf_slim package, which is not installed "
                        "(pip install tf-slim)" % (fullname, name), name=fullname) from err
                if err.name == name:
                    raise ModuleNotFoundError(_NOT_MAPPED % fullname, name=fullname) from err
                raise
    raise ModuleNotFoundError(_NOT_MAPPED % fullname, name=fullname)


__all__ = ["resolve_module"]
