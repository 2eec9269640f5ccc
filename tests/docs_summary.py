"""The session summary's "documentation blocks" section: how many blocks of README.md and docs/
ran, how many were skipped on this stack, which and why (tests/test_docs_pages.py records each
page's verdict as a user property, which pytest-xdist's workers hand to the controller)."""


class DocsSummary:
    def __init__(self):
        self.verdicts = []

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        for key, value in getattr(report, "user_properties", ()):
            if key == "docs_blocks":
                self.verdicts.append(value)

    def pytest_terminal_summary(self, terminalreporter):
        if not self.verdicts:
            return
        ran = sum(len(v["ran"]) for v in self.verdicts)
        skipped = [(v["page"], line, reason) for v in self.verdicts for line, reason in v["skipped"]]
        terminalreporter.section("documentation blocks", sep="-")
        terminalreporter.line("%d pages: %d blocks ran, %d skipped on this stack"
                              % (len(self.verdicts), ran, len(skipped)))
        for page, line, reason in sorted(skipped):
            terminalreporter.line("  skipped %s line %d: %s" % (page, line, reason))


def pytest_configure(config):
    if not hasattr(config, "workerinput"):   # under pytest-xdist the controller reports
        config.pluginmanager.register(DocsSummary(), "nls_docs_summary")
