"""The public surface: the top-level table, ``__all__`` of every public module, and the old
import paths of moved modules (kept for one release, as the same module, with a warning)."""
import ast
import importlib
import os
import subprocess
import sys
import warnings

import pytest

import npu_loss_scale as nls
from npu_loss_scale._internal import moved

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(ROOT, "npu_loss_scale")


def _public_modules():
    """Every module of the package outside _internal, the shim and private files."""
    names = []
    for folder, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = [d for d in dirs if not d.startswith("_")]
        for name in files:
            if name.endswith(".py") and (name == "__init__.py" or not name.startswith("_")):
                rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
                names.append(rel[:-len(".__init__")] if rel.endswith(".__init__") else rel)
    return sorted(set(names) - {"npu_loss_scale.emulate"})  # a deprecated alias when imported


def test_the_table_is_all_and_every_name_resolves():
    assert sorted(nls.__all__) == sorted(nls._EXPORTS)  # pylint: disable=protected-access
    for name in nls.__all__:
        assert getattr(nls, name) is not None, name
    assert set(nls.__all__) <= set(dir(nls))


def test_every_error_and_warning_class_a_user_may_catch_is_exported():
    from npu_loss_scale._internal import messages  # pylint: disable=import-outside-toplevel
    warning_classes = {name for name, value in vars(messages).items()
                       if isinstance(value, type) and issubclass(value, Warning)}
    assert warning_classes == {"NpuLossScaleWarning", "LossScaleStuckWarning",
                               "OverflowInvisibleWarning", "RanksMayDivergeWarning",
                               "FusedKernelWarning"}
    for name in warning_classes | {"AgreementError", "NoInfChecksError"}:
        assert name in nls.__all__, name
    assert issubclass(nls.AgreementError, RuntimeError)
    assert issubclass(nls.RanksMayDivergeWarning, nls.NpuLossScaleWarning)


def test_the_type_checking_imports_list_the_same_names_as_the_table():
    with open(os.path.join(PACKAGE_DIR, "__init__.py")) as source:
        tree = ast.parse(source.read())
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and getattr(node.test, "id", None) == "TYPE_CHECKING")
    seen = {}
    for node in block.body:
        for alias in node.names:
            name = alias.asname or alias.name
            seen[name] = ("." + node.module[len("npu_loss_scale."):],
                          None if alias.name == name and node.module + "." + name in
                          {"npu_loss_scale" + m for m, a in nls._EXPORTS.values() if a is None}  # pylint: disable=protected-access
                          else alias.name)
    # same names, and each from the module the lazy table loads it from
    assert sorted(seen) == sorted(nls._EXPORTS)  # pylint: disable=protected-access
    for name, (module, attr) in nls._EXPORTS.items():  # pylint: disable=protected-access
        if attr is None:
            continue
        assert getattr(importlib.import_module(seen[name][0], "npu_loss_scale"),
                       seen[name][1]) is getattr(nls, name), name


def test_only_the_table_is_public_at_the_top():
    code = ("import npu_loss_scale as nls\n"
            "for name in ('_graphs', 'scaling', 'policy', 'emulate', 'pytest_plugin'):\n"
            "    try:\n"
            "        getattr(nls, name)\n"
            "    except AttributeError:\n"
            "        print('no', name)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    assert out == ["no", "_graphs", "no", "scaling", "no", "policy", "no", "emulate",
                   "no", "pytest_plugin"]


@pytest.mark.parametrize("module", _public_modules())
def test_every_public_module_says_what_it_exports(module):
    imported = importlib.import_module(module)
    assert isinstance(getattr(imported, "__all__", None), (list, tuple)), module
    missing = []
    for name in imported.__all__:
        try:
            getattr(imported, name)
        except AttributeError:
            missing.append(name)
        except ImportError as err:  # what this TensorFlow cannot have says so, by name
            assert name in str(err), err
    assert missing == []
    assert len(set(imported.__all__)) == len(imported.__all__)


# -- the old paths --------------------------------------------------------------------------------
_PROBE = """
import importlib, json, sys, warnings
from npu_loss_scale._internal import moved
warnings.simplefilter("always")
seen = {}
for old in sorted(moved.MOVED, key=len):  # a package before its submodules
    name = "npu_loss_scale." + old
    with warnings.catch_warnings(record=True) as caught:
        module = importlib.import_module(name)
    new = importlib.import_module("npu_loss_scale." + moved.MOVED[old])
    seen[old] = [module is new, new.__spec__.name, sys.modules[name] is new,
                 [[w.category.__name__, str(w.message), w.filename] for w in caught]]
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def old_paths(tmp_path_factory):
    """Each old path imported once, in one fresh process, by a probe script; and the script."""
    import json  # pylint: disable=import-outside-toplevel
    probe = tmp_path_factory.mktemp("old_paths") / "probe.py"
    probe.write_text(_PROBE)
    out = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    return json.loads(out.splitlines()[-1]), str(probe)


@pytest.mark.parametrize("old", sorted(moved.MOVED))
def test_an_old_path_is_the_new_module_and_warns_naming_it(old, old_paths):  # pylint: disable=redefined-outer-name
    new = "npu_loss_scale." + moved.MOVED[old]
    seen, probe = old_paths
    same, spec_name, in_sys_modules, caught = seen[old]
    assert (same, spec_name, in_sys_modules) == (True, new, True)
    message = ("npu_loss_scale.%s is deprecated and will be removed in 0.4; use %s instead"
               % (old, new))
    # the warning points at the line that imported the old path (the probe's import_module)
    assert ["DeprecationWarning", message, probe] in caught, caught


def test_a_submodule_of_a_moved_package_is_not_loaded_twice():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("npu_loss_scale._compat.ops")
    new = importlib.import_module("npu_loss_scale._internal.compat.ops")
    assert old is new


def test_monkeypatching_the_old_path_reaches_the_code_that_runs(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("npu_loss_scale.emulation")
    monkeypatch.setattr(old, "_mode", old.INF_NAN)
    assert nls.is_inf_nan_enabled() is True
    assert nls.get_device_sat_mode() == 1


def test_the_emulate_command_runs_from_its_documented_path_without_a_warning():
    result = subprocess.run([sys.executable, "-W", "error::DeprecationWarning",
                             "-m", "npu_loss_scale.emulate", "--version"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == nls.__version__
    assert "Deprecation" not in result.stderr


def test_a_folder_left_at_an_old_package_path_does_not_hide_the_alias(tmp_path):
    """An update of a checkout leaves ``_compat/__pycache__`` behind: that empty folder imports as
    a namespace package unless the finder of old paths answers first; a real file still wins."""
    (tmp_path / "_compat" / "__pycache__").mkdir(parents=True)
    (tmp_path / "scaling.py").write_text("")
    finder = nls._OldPaths()  # pylint: disable=protected-access
    spec = finder.find_spec("npu_loss_scale._compat", [str(tmp_path)])
    assert spec is not None and type(spec.loader).__name__ == "_Alias"
    assert finder.find_spec("npu_loss_scale.scaling", [str(tmp_path)]) is None
