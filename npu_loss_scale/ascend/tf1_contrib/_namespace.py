"""The namespace objects that stand for ``tf.contrib`` and its submodules: a name not mapped
raises an AttributeError that names it."""
import types


class _Namespace(types.SimpleNamespace):
    _path = "tf.contrib"
    _fallback = None  # a function returning the modules to look a name up in, in order

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        fallback = object.__getattribute__(self, "_fallback")
        if fallback is not None and not name.startswith("_"):
            for module in fallback():
                if module is not None and hasattr(module, name):
                    return getattr(module, name)
        raise AttributeError("%s.%s is not mapped to TensorFlow 2 by the TF1 mode of "
                             "npu_loss_scale.emulate" % (object.__getattribute__(self, "_path"),
                                                         name))


def _ns(path, fallback=None, **names):
    ns = _Namespace(**names)
    object.__setattr__(ns, "_path", path)
    object.__setattr__(ns, "_fallback", fallback)
    return ns


__all__ = []
