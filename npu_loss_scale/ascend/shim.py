"""The CPU shim of Ascend's packages (``npu_bridge``, ``npu_device``, ``hccl``, ``moxing``, in the
folder ``_npu_bridge_shim`` of the package) put on ``sys.path`` and taken off again: what ``python
-m npu_loss_scale.emulate`` and the pytest plugin's ``npu_device`` fixture do first. A real
``npu_bridge`` always wins; an Ascend module the shim does not have raises an error naming it.
Importing this module imports no TensorFlow (``npu-emulate --help`` stays quick)."""
import importlib
import importlib.util
import os
import sys

SHIM_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_npu_bridge_shim")
SHIM_PACKAGES = ("npu_bridge", "hccl", "npu_device", "moxing")


def _is_shim_module(module):
    return bool(getattr(module, "__npu_loss_scale_shim__", False))


def real_npu_bridge_origin():
    """Where a real ``npu_bridge`` would be imported from with the current ``sys.path``, or None."""
    loaded = sys.modules.get("npu_bridge")
    if loaded is not None:
        return None if _is_shim_module(loaded) else (getattr(loaded, "__file__", None) or "?")
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != SHIM_DIR]
        spec = importlib.util.find_spec("npu_bridge")
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path[:] = saved
    if spec is None:
        return None
    return spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]


NOT_EMULATED_TOPS = SHIM_PACKAGES


class _NotEmulatedFinder:
    """Last on ``sys.meta_path``: an Ascend module no finder found is "not emulated", by name.

    Being last, it only answers for modules nothing else provides, so it never hides a real
    ``npu_device`` or a real module of the shim.
    """

    @staticmethod
    def find_spec(fullname, path=None, target=None):  # pylint: disable=unused-argument
        top = fullname.split(".", 1)[0]
        if top not in NOT_EMULATED_TOPS:
            return None
        what = ("%s is not emulated on CPU by npu_loss_scale (python -m "
                "npu_loss_scale.emulate); nothing stands in for it" % fullname)
        raise ModuleNotFoundError(what, name=fullname)


_FINDER = _NotEmulatedFinder()


def install_shim():
    """Makes ``npu_bridge`` resolve to the CPU shim unless a real one is importable.

    Returns True when the shim is (now) in use, False when a real npu_bridge is there.
    """
    if real_npu_bridge_origin() is not None:
        return False
    if SHIM_DIR not in sys.path:
        sys.path.append(SHIM_DIR)
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
    from npu_loss_scale._internal import probe  # imports TensorFlow  pylint: disable=import-outside-toplevel
    probe.use_stand_in(_import_shim_module)
    return True


def _import_shim_module(name):
    """A module of the shim by the adapter's name: how the layers below reach the shim while it
    is installed (handed to :func:`npu_loss_scale._internal.probe.use_stand_in`)."""
    return importlib.import_module(name)


def uninstall_shim():
    """Undoes :func:`install_shim`: the shim folder leaves ``sys.path``, its modules ``sys.modules``."""
    probe = sys.modules.get("npu_loss_scale._internal.probe")  # imported by install_shim
    if probe is not None:
        probe.use_stand_in(None)
    sys.path[:] = [p for p in sys.path if p != SHIM_DIR]
    sys.meta_path[:] = [f for f in sys.meta_path if f is not _FINDER]
    # the shim's packages are decided before any is removed: a package can leave sys.modules
    # before its submodules (moxing before moxing.file), which must still be undone and removed
    shim_tops = {top for top in SHIM_PACKAGES if _is_shim_module(sys.modules.get(top))}
    for name in list(sys.modules):
        if name.split(".", 1)[0] in shim_tops:
            undo = getattr(sys.modules[name], "__npu_loss_scale_uninstall__", None)
            if callable(undo):  # e.g. moxing.file.shift('os', 'mox') patched os functions
                undo()
            del sys.modules[name]


__all__ = ["SHIM_DIR", "SHIM_PACKAGES", "NOT_EMULATED_TOPS", "real_npu_bridge_origin",
           "install_shim", "uninstall_shim"]
