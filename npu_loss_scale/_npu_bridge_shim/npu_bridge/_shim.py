"""What every shim module shares: the error for a name the CPU emulation does not provide."""
import importlib


class NotEmulatedError(ImportError):
    """An npu_bridge / hccl / npu_device name the CPU emulation of npu_loss_scale does not provide.

    It is an ImportError so ``from npu_bridge.x import y`` reports it with its message.
    """


def not_emulated_message(qualified, provided=()):
    text = ("%s is not emulated on CPU by npu_loss_scale (python -m npu_loss_scale.emulate); "
            "nothing stands in for it." % qualified)
    if provided:
        text += " This shim module provides: %s." % ", ".join(sorted(provided))
    return text


def module_getattr(module_name, provided=(), package=False):
    """A module ``__getattr__`` raising :class:`NotEmulatedError` for names the shim lacks.

    For a package, a name that is a submodule of the shim is imported and returned first.
    """

    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError("module %r has no attribute %r" % (module_name, name))
        if package:
            try:
                return importlib.import_module(module_name + "." + name)
            except ModuleNotFoundError as err:
                if err.name != module_name + "." + name:
                    raise
        raise NotEmulatedError(not_emulated_message(module_name + "." + name, provided),
                               name=module_name)

    return __getattr__


def public_names(namespace):
    return [n for n, v in namespace.items()
            if not n.startswith("_") and getattr(v, "__module__", None) != "__future__"]
