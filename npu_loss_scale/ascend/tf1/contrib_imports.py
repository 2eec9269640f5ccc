"""``import tensorflow.contrib.x`` and ``tensorflow.examples.tutorials.mnist`` in user files: resolved
through :mod:`npu_loss_scale.ascend.tf1_contrib` and :mod:`npu_loss_scale.ascend.tf1_mnist`."""


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
    from npu_loss_scale.ascend.tf1_contrib import (  # pylint: disable=import-outside-toplevel
        resolve_module)
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


__all__ = []
