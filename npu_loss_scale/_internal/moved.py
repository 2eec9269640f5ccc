"""The old import paths of modules that moved in 0.3, kept for one release.

``import npu_loss_scale.policy`` (and every other path below) still works and returns the very
module object of the new path, so ``monkeypatch.setattr`` on it reaches the code that runs; it
warns once, with a :class:`DeprecationWarning` naming the new path. ``MOVED`` is the one table.
The finder that asks :func:`find_spec` is in ``npu_loss_scale/__init__.py``, so that this module
is imported only when an old path is. A name that left a module which stays (``MOVED_NAMES``)
answers through that module's ``__getattr__`` and :func:`moved_name`, the same way. The aliases
go in 0.4 (see docs/releases.md).
"""
import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

PACKAGE = "npu_loss_scale"

# old path -> new path, both relative to the package; a package's submodules follow it
MOVED = {
    "_checks": "_internal.checks",
    "_graphs": "_internal.graphs",
    "_state_io": "_internal.state_io",
    "_messages": "_internal.messages",
    "_compat": "_internal.compat",
    "_kernels": "_internal.kernels",
    "_unscale": "scaling.unscale",
    "policy": "scaling.managers",
    "megatron_scalers": "scaling.megatron",
    "reference": "scaling.reference.ascend",
    "reference_megatron": "scaling.reference.megatron",
    "reference_grad_scaler": "scaling.reference.torch",
    "emulation": "device.register",
    "saturation": "device.saturation",
    "localisation": "device.localisation",
    "ascend.precision": "device.precision",
    "ascend.precision_modes": "device.precision_modes",
    "frontends._overflow": "detection.step",
    "optimizer": "optimizers.loss_scale",
    "mixed_precision": "optimizers.megatron",
    "hooks": "frontends.hooks",
    "advisor": "tools.advisor",
    "flags": "ascend.flags",
    "env_report": "cli.env_report",
}

# names that left a module which stays: old "module.name" -> the new module, both relative
MOVED_NAMES = {
    "agreement.count_collectives": "tools.graph_checks",
}


def new_path(old):
    """The new absolute module name of the old absolute name ``old``, or None if it did not move."""
    if not old.startswith(PACKAGE + "."):
        return None
    rel = old[len(PACKAGE) + 1:]
    for moved, target in MOVED.items():
        if rel == moved or rel.startswith(moved + "."):
            return "%s.%s%s" % (PACKAGE, target, rel[len(moved):])
    return None


def _is_import_machinery(filename):
    # the frames that warnings.warn itself skips when it counts a stacklevel
    return "importlib" in filename and "_bootstrap" in filename


def _stacklevel(own_files):
    """The stacklevel, for a warning raised in :func:`warn_moved`, of the code that imported the
    old path: the first frame outside ``own_files`` (this module, the old path's own stub,
    ``importlib.import_module``) and the import machinery."""
    level, frame = 1, sys._getframe(2)  # pylint: disable=protected-access
    while frame is not None:
        name = frame.f_code.co_filename
        if not _is_import_machinery(name):
            if name not in own_files:
                return level
            level += 1
        frame = frame.f_back
    return 1


def warn_moved(old, new, stub_file=None):
    """The one deprecation message of a moved module, pointing at the import of the old path
    (``stub_file``: the file of an old path that is still a module of its own, which calls this)."""
    warnings.warn("%s is deprecated and will be removed in 0.4; use %s instead" % (old, new),
                  DeprecationWarning,
                  stacklevel=_stacklevel((__file__, stub_file, importlib.__file__)) + 1)


def moved_name(module, name, stub_file):
    """For the ``__getattr__`` of ``module`` (an absolute name; ``stub_file`` its file): the
    object ``name`` of :data:`MOVED_NAMES` at its new place (the very object), with the
    deprecation warning; AttributeError for any other name."""
    target = MOVED_NAMES.get("%s.%s" % (module[len(PACKAGE) + 1:], name))
    if target is None:
        raise AttributeError("module %r has no attribute %r" % (module, name))
    new = "%s.%s" % (PACKAGE, target)
    warn_moved("%s.%s" % (module, name), "%s.%s" % (new, name), stub_file)
    return getattr(importlib.import_module(new), name)


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module of its new path (the same object)."""

    def __init__(self, new):
        self._new = new
        self._spec = None

    def create_module(self, spec):
        warn_moved(spec.name, self._new)
        module = importlib.import_module(self._new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # Nothing to run (the new module ran when it was imported); the import system has just
        # set the alias's spec on the module: give it back its own.
        module.__spec__ = self._spec


def find_spec(fullname):
    """The spec that loads the old path ``fullname`` as its new module, or None if it did not
    move (the package's finder asks, see ``npu_loss_scale/__init__.py``)."""
    new = new_path(fullname)
    if new is None:
        return None
    return importlib.machinery.ModuleSpec(fullname, _Alias(new))
