"""The CI stacks' skip policy (tests/skip_policy.py): a skip whose reason the stack's allowlist
does not name fails the session and is listed; an allowed one passes; without NLS_STACK there is
no policy.

Each case runs a small pytest session in a subprocess, on a copy of the plugin beside its own
``scripts/stacks/`` folder, with plugin autoloading off (no TensorFlow): about half a second each.
"""
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tf_independent   # pytest and Python only: CI runs it on tf215 (and tf115's pytest 7)

PLUGIN = pathlib.Path(__file__).with_name("skip_policy.py")

SAMPLE = '''
import pytest

def test_runs():
    pass

def test_lacks_estimator():
    pytest.skip("tf.compat.v1.estimator is absent (TF 2.16+)")

@pytest.mark.skipif(True, reason="flaky on Tuesdays")
def test_skipped_by_marker():
    pass
'''

MODULE_SKIP = '''
import pytest
pytest.skip("the model package is not installed", allow_module_level=True)

def test_never_collected():
    pass
'''


def _session(tmp_path, allowlist, stack="fake", files=None, extra_args=(), more_lists=None):
    """Runs pytest on ``files`` (name -> source) with the plugin, ``allowlist`` as the text of
    ``fake.skips`` (``more_lists``: other lists, name -> text); returns (exit code, output)."""
    (tmp_path / "tests").mkdir()
    shutil.copy(str(PLUGIN), str(tmp_path / "tests" / PLUGIN.name))
    stacks = tmp_path / "scripts" / "stacks"
    stacks.mkdir(parents=True)
    lists = dict(more_lists or {})
    if allowlist is not None:
        lists["fake"] = allowlist
    for name, text in lists.items():
        (stacks / (name + ".skips")).write_text(text)
    for name, source in (files or {"test_sample.py": SAMPLE}).items():
        (tmp_path / "tests" / name).write_text(source)
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               PYTHONPATH=str(tmp_path / "tests"))
    env.pop("NLS_STACK", None)
    if stack is not None:
        env["NLS_STACK"] = stack
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "skip_policy", "-p", "no:cacheprovider", "-q",
         "-c", os.devnull, "--rootdir", str(tmp_path), "tests"] + list(extra_args),
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True, timeout=120)
    return result.returncode, result.stdout


def test_a_skip_the_allowlist_does_not_name_fails_the_session_and_is_listed(tmp_path):
    code, out = _session(tmp_path, "# TF 2.21 has no Estimator\nestimator is absent\n")
    assert code == 1, out
    assert "skips not allowed on stack fake" in out
    assert "tests/test_sample.py::test_skipped_by_marker: flaky on Tuesdays" in out
    assert "test_lacks_estimator:" not in out   # its reason is on the list
    assert "1 test(s) skipped" in out


def test_skips_the_allowlist_names_pass(tmp_path):
    code, out = _session(tmp_path, "estimator is absent  # comment after a reason\n"
                                   "\n# a comment line\non Tuesdays\n")
    assert code == 0, out
    assert "2 skipped" in out
    assert "not allowed" not in out


def test_an_empty_allowlist_allows_no_skip(tmp_path):
    code, out = _session(tmp_path, "# nothing may skip here\n")
    assert code == 1, out
    assert "test_lacks_estimator: tf.compat.v1.estimator is absent (TF 2.16+)" in out
    assert "2 test(s) skipped" in out


def test_a_module_skipped_at_collection_is_caught(tmp_path):
    code, out = _session(tmp_path, "estimator is absent\n",
                         files={"test_model.py": MODULE_SKIP})
    assert code == 1, out
    assert "tests/test_model.py: the model package is not installed" in out


def test_without_the_variable_there_is_no_policy(tmp_path):
    code, out = _session(tmp_path, "", stack=None)
    assert code == 0, out
    assert "2 skipped" in out
    assert "not allowed" not in out


def test_lists_joined_with_plus_allow_the_reasons_of_both(tmp_path):
    code, out = _session(tmp_path, "estimator is absent\n", stack="fake+tuesday",
                         more_lists={"tuesday": "on Tuesdays\n"})
    assert code == 0, out
    assert "2 skipped" in out


def test_a_stack_without_an_allowlist_is_a_usage_error(tmp_path):
    code, out = _session(tmp_path, "", stack="fake+tf999")
    assert code == pytest.ExitCode.USAGE_ERROR, out
    assert "NLS_STACK=fake+tf999 names a skip allowlist that does not exist" in out
    assert "tf999.skips" in out


if importlib.util.find_spec("xdist") is not None:   # the stacks test.sh runs with pytest-xdist
    def test_under_pytest_xdist_the_controller_fails_the_session(tmp_path):
        code, out = _session(tmp_path, "estimator is absent\n",
                             files={"test_sample.py": SAMPLE, "test_model.py": MODULE_SKIP},
                             extra_args=["-p", "xdist", "-n", "2"])
        assert code == 1, out
        assert "tests/test_sample.py::test_skipped_by_marker: flaky on Tuesdays" in out
        assert "tests/test_model.py: the model package is not installed" in out
        assert "2 test(s) skipped" in out
