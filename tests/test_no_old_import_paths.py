"""The package's examples, scripts and tests use the import paths of 0.3: an old path (one that
warns "deprecated and will be removed in 0.4", npu_loss_scale/_internal/moved.py) is imported
only by the tests of the old paths themselves. The documentation's blocks run with those
warnings as errors (tests/test_docs_pages.py)."""
import ast
import os
import re

import pytest

import npu_loss_scale
from npu_loss_scale._internal import moved

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("examples", "scripts", "tests")
# the tests of the old paths: they import them on purpose, and check the warning (this file
# names them as data)
OLD_PATH_TESTS = {os.path.join("tests", "test_public_api.py"),
                  os.path.join("tests", "test_no_old_import_paths.py")}

pytestmark = pytest.mark.tf_independent


def _is_old(name):
    if moved.new_path(name) is not None:
        return True
    module, _, attribute = name.rpartition(".")
    return "%s.%s" % (module[len(moved.PACKAGE) + 1:], attribute) in moved.MOVED_NAMES


def old_paths(source):
    """(line, name) of each old path ``source`` imports, or names as a string (for
    ``importlib.import_module``); ``from npu_loss_scale import X`` counts only when X is not a
    public name of the package's table."""
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == moved.PACKAGE:
            names = [node.module] if _is_old(node.module) else [
                "%s.%s" % (node.module, alias.name) for alias in node.names
                if not (node.module == moved.PACKAGE and alias.name in npu_loss_scale.__all__)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                re.fullmatch(r"npu_loss_scale(\.\w+)+", node.value):
            names = [node.value]
        for name in names:
            if _is_old(name):
                yield node.lineno, name


def _python_files():
    for folder in FOLDERS:
        for path, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(path, name), ROOT)


def test_no_example_script_or_test_imports_an_old_path():
    found = []
    for path in _python_files():
        if path in OLD_PATH_TESTS:
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            found += ["%s:%d %s" % (path, line, name) for line, name in old_paths(f.read())]
    assert not found, "old import paths (use what moved.py maps them to):\n" + "\n".join(found)


@pytest.mark.parametrize("source, expected", [
    ("from npu_loss_scale import localisation, saturation", ["npu_loss_scale.localisation"]),
    ("import npu_loss_scale.policy as policy", ["npu_loss_scale.policy"]),
    ("from npu_loss_scale.advisor import advise_model", ["npu_loss_scale.advisor"]),
    ("importlib.import_module('npu_loss_scale.hooks')", ["npu_loss_scale.hooks"]),
    ("from npu_loss_scale.agreement import count_collectives",
     ["npu_loss_scale.agreement.count_collectives"]),
    ("from npu_loss_scale import saturation, emulation, GradScaler", []),
    ("from npu_loss_scale.device import localisation\nfrom npu_loss_scale.tools import advisor", []),
], ids=["from-package", "import", "from-module", "string", "moved-name", "public", "new"])
def test_old_paths_are_found_in_each_form(source, expected):
    assert [name for _, name in old_paths(source)] == expected
