"""The skip policy of the CI stacks, as a pytest plugin (registered by ``tests/conftest.py``).

A test that skips proves nothing, so on the stacks CI runs a skip is allowed only for a reason
that stack is known to lack (TensorFlow 2.21 has no Estimator, TensorFlow 1.15 no eager
execution, ...). ``scripts/test.sh`` names the stack in the environment variable ``NLS_STACK``;
the reasons it accepts are listed in ``scripts/stacks/<stack>.skips``, one substring of the skip
reason a line (``#`` starts a comment, blank lines are ignored, an empty list allows no skip).
Several lists are joined with ``+``: ``NLS_STACK=tf215+quick`` accepts the reasons of
``tf215.skips`` and ``quick.skips``.
Any other skip — of a test or of a whole module at collection — fails the session, and the
terminal summary lists each one's test id and reason.

Without ``NLS_STACK`` (a plain ``pytest`` in a user's or contributor's environment) there is no
policy: skips are reported as pytest always does.

The module imports nothing but pytest, so its own tests can run it in a small pytest session.
"""
import os
import pathlib

import pytest

ENV_VAR = "NLS_STACK"
ALLOWLIST_DIR = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "stacks"
ALLOWLIST_SUFFIX = ".skips"


def allowlist_paths(stack):
    """The files listing the skip reasons ``stack`` accepts (``a+b``: those of ``a`` and ``b``)."""
    return [ALLOWLIST_DIR / (name.strip() + ALLOWLIST_SUFFIX) for name in stack.split("+")]


def read_allowlist(path):
    """The allowed reason substrings in ``path`` (comments and blank lines dropped)."""
    allowed = []
    for line in path.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            allowed.append(text)
    return allowed


def skip_reason(report):
    """The reason of a skipped test or collection report, as pytest's ``-rs`` summary shows it."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    prefix = "Skipped: "
    return reason[len(prefix):] if reason.startswith(prefix) else reason


class SkipPolicy:
    """Collects the skips of one session and fails it when one is not on the stack's list."""

    def __init__(self, stack, allowed):
        self.stack = stack
        self.allowed = allowed
        self.unexpected = []   # (test or module id, reason)

    def _check(self, report):
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        reason = skip_reason(report)
        if not any(text in reason for text in self.allowed):
            self.unexpected.append((report.nodeid, reason))

    def pytest_runtest_logreport(self, report):
        self._check(report)

    def pytest_collectreport(self, report):
        self._check(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if self.unexpected and session.exitstatus in (pytest.ExitCode.OK,
                                                      pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.unexpected:
            return
        terminalreporter.section("skips not allowed on stack %s" % self.stack, sep="=", red=True)
        for nodeid, reason in self.unexpected:
            terminalreporter.line("%s: %s" % (nodeid, reason))
        terminalreporter.line(
            "%d test(s) skipped for a reason that %s does not list: they must run on %s "
            "(install what they need), or, if the stack truly lacks it, add the reason there "
            "with a comment saying why." % (
                len(self.unexpected), " + ".join(str(p) for p in allowlist_paths(self.stack)),
                self.stack), red=True)


def pytest_configure(config):
    stack = os.environ.get(ENV_VAR, "").strip()
    if not stack or hasattr(config, "workerinput"):
        return   # no policy outside CI's stacks; under pytest-xdist the controller applies it
    allowed = []
    for path in allowlist_paths(stack):
        if not path.is_file():
            raise pytest.UsageError(
                "%s=%s names a skip allowlist that does not exist: %s (create it, empty if "
                "nothing may skip there, or unset %s for no policy)" % (ENV_VAR, stack, path,
                                                                       ENV_VAR))
        allowed += read_allowlist(path)
    config.pluginmanager.register(SkipPolicy(stack, allowed), "nls_skip_policy")
