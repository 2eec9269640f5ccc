"""The documentation site's API reference covers every public name of the package.

The site itself is built by scripts/build_docs.sh (mkdocs --strict: a broken link or a missing
reference fails it); this test needs no mkdocs. It reads the ``::: dotted.path`` directives of
docs/reference/*.md and checks them against the package's table of public names.
"""
import glob
import os
import re

import npu_loss_scale

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# public names whose attribute in the submodule has another name
RENAMED = {"BACKEND_ENV_VAR": "ENV_VAR"}


def _documented():
    paths = set()
    for page in glob.glob(os.path.join(ROOT, "docs", "reference", "*.md")):
        with open(page, encoding="utf-8") as f:
            paths.update(re.findall(r"^::: ([\w.]+)$", f.read(), re.M))
    return paths


def _covers(path, module, attr):
    if attr is None:
        return path == module
    # the name where it is defined: in the submodule, or in a module of that subpackage
    return path == module + "." + attr or (path.startswith(module + ".")
                                          and path.endswith("." + attr))


def test_every_public_name_has_a_reference_entry():
    documented = _documented()
    missing = []
    for name, (module, attr) in npu_loss_scale._EXPORTS.items():  # pylint: disable=protected-access
        module = "npu_loss_scale" + module
        attr = RENAMED.get(name, attr)
        if not any(_covers(path, module, attr) for path in documented):
            missing.append(name)
    assert not missing, "public names without an entry in docs/reference/: %s" % missing


def test_every_reference_entry_names_a_module_that_exists():
    for path in _documented():
        parts = path.split(".")
        found = any(os.path.exists(os.path.join(ROOT, *parts[:i]) + suffix)
                    for i in range(len(parts), 0, -1) for suffix in (".py", "/__init__.py"))
        assert found, path
