"""Which files are the user's own in TF1 mode: outside site-packages, the standard library and
folders holding a package's install metadata (a model's sibling folders on ``sys.path`` are)."""
import os
import sys
import sysconfig


_state = {}  # caches


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


__all__ = []
