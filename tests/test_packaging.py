"""The package's metadata agrees with the pinned requirements and the change log (no TensorFlow).

``pyproject.toml`` states what users install (its extras, unpinned or with ranges); the files in
``requirements/`` pin what CI installs (``scripts/setup_env.sh`` reads them). These tests keep
the two in step: the ``test`` extra is installed on every CI stack, each TensorFlow extra admits
its stack's pins, and every stack the set-up script offers has its file. The building and
installing of the wheel itself is checked by ``scripts/wheel_smoke.sh``.
"""
import os
import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs Python 3.11's "
                                                  "tomllib or the tomli package")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIREMENTS = os.path.join(ROOT, "requirements")
CI_STACKS = ("tf215", "tf221", "tf115", "tf265")


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]


def _extra(name):
    return [Requirement(text) for text in _project()["optional-dependencies"][name]]


def _pins(path):
    """The requirements of a pip requirements file, its ``-r`` includes followed: {name: Requirement}."""
    found = {}
    with open(path) as handle:
        for line in handle:
            line = re.sub(r"(^|\s)#.*", "", line).strip()
            if not line:
                continue
            if line.startswith("-r"):
                found.update(_pins(os.path.join(os.path.dirname(path), line[2:].strip())))
                continue
            requirement = Requirement(line)
            found[canonicalize_name(requirement.name)] = requirement
    return found


def _stack(name):
    return _pins(os.path.join(REQUIREMENTS, name + ".txt"))


def _pinned_version(requirement):
    """The version of an ``==`` pin, else None."""
    exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
    return exact[0] if exact else None


@pytest.mark.parametrize("stack", CI_STACKS)
def test_every_ci_stack_installs_the_test_extra(stack):
    pins = _stack(stack)
    missing = [r.name for r in _extra("test") if canonicalize_name(r.name) not in pins]
    assert not missing, ("the [test] extra's %s missing from requirements/%s.txt: the suite run "
                         "by CI would differ from a user's pip install .[test]" % (missing, stack))


def test_the_test_extra_names_what_requirements_test_txt_pins():
    extra = sorted(canonicalize_name(r.name) for r in _extra("test"))
    assert extra == sorted(_pins(os.path.join(REQUIREMENTS, "test.txt")))


@pytest.mark.parametrize("stack", CI_STACKS)
def test_each_tensorflow_extra_admits_its_stacks_pins(stack):
    pins = _stack(stack)
    for requirement in _extra(stack):
        name = canonicalize_name(requirement.name)
        assert name in pins, "extra [%s] needs %s, which requirements/%s.txt does not list" % (
            stack, requirement, stack)
        version = _pinned_version(pins[name])
        if version is not None:
            assert requirement.specifier.contains(version, prereleases=True), (
                "extra [%s] asks for %s; requirements/%s.txt pins %s" % (
                    stack, requirement, stack, pins[name]))


@pytest.mark.parametrize("stack", ("tf215", "tf265"))
def test_the_estimator_extra_admits_the_pinned_estimators(stack):
    (requirement,) = _extra("estimator")
    pin = _stack(stack)[canonicalize_name(requirement.name)]
    assert requirement.specifier.contains(_pinned_version(pin))


def test_every_stack_of_setup_env_has_its_requirements_file():
    with open(os.path.join(ROOT, "scripts", "setup_env.sh")) as handle:
        stacks = re.search(r'^STACKS="([^"]+)"', handle.read(), re.M).group(1).split()
    assert set(CI_STACKS) <= set(stacks)
    for stack in stacks:
        assert _stack(stack), "requirements/%s.txt lists nothing" % stack


def test_no_extra_claims_to_install_horovod():
    # Horovod builds from source against the installed TensorFlow (scripts/build_horovod.sh):
    # pip's isolated build of an extra cannot see TensorFlow, so such an extra would not work.
    for name, requirements in _project()["optional-dependencies"].items():
        assert not [r for r in requirements if Requirement(r).name.lower() == "horovod"], name


def test_the_version_has_a_change_log_entry():
    with open(os.path.join(ROOT, "npu_loss_scale", "__init__.py")) as handle:
        version = re.search(r'^__version__ = "([^"]+)"', handle.read(), re.M).group(1)
    with open(os.path.join(ROOT, "CHANGELOG.md")) as handle:
        headings = re.findall(r"^## (\S+)", handle.read(), re.M)
    assert version in headings, ("__version__ is %s but CHANGELOG.md has no '## %s' section "
                                 "(docs/releases.md: how to cut a release)" % (version, version))
    assert headings[:2] == ["Unreleased", version], headings
