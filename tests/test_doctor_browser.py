"""The doctor's page in a real browser: Debian's chromium (/usr/bin/chromium; scripts/test.sh
installs it) driven headless by Playwright, from a file:// URL. For each hand-written report
(tests/doctor_reports.py): the page renders, every plot is a drawn SVG of some size with its
caption and text alternative, every finding of the report is shown, the browser makes no request
but the page itself and its console logs no error, and nothing is wider than the window; a
screenshot of each page is taken. Two control pages show that a request would be caught: one by
the request record, one by the page's content policy's console error.

Playwright rather than Selenium: it drives the browser over its own protocol from one pip
package, with every request and console message as an event, so Debian's chromium is the only
other thing needed (Selenium would also need chromium-driver and its logging preferences to see
requests). Its own browser download (``playwright install``) is never used.

The Python 3.11 stacks run it (tf215, tf221: requirements/browser.txt); under scripts/test.sh a
skip fails there (nothing may skip on tf215). Slow: one browser start for the module, then about
half a second a page (measure: pytest --durations=0 tests/test_doctor_browser.py).
"""
import os
import pathlib

import pytest

from doctor_reports import EXPECTED, REPORTS

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDTH = 1200

pytestmark = pytest.mark.slow
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the browser test needs Playwright (requirements/browser.txt)")
pytest.importorskip("jinja2", reason="the doctor's page needs Jinja2 (the [doctor] extra)")
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip("Debian's chromium is not installed at %s (scripts/test.sh installs it with "
                "apt-get install chromium)" % CHROMIUM, allow_module_level=True)

from npu_loss_scale.tools.doctor.html import render_html  # noqa: E402 pylint: disable=wrong-import-position


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """{report name: the page's file}, written once for the module."""
    folder = tmp_path_factory.mktemp("doctor-pages")
    written = {}
    for name in EXPECTED:
        written[name] = folder / (name + ".html")
        written[name].write_text(render_html(REPORTS[name]()), encoding="utf-8")
    return written


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless chromium with a fresh profile for the module."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": WIDTH, "height": 900})
        yield context
        context.close()


class Visit:  # pylint: disable=too-few-public-methods
    """One page loaded in the browser, with every request the browser made for it and every
    console message and uncaught error it logged."""

    def __init__(self, browser, path):
        self.url = pathlib.Path(path).resolve().as_uri()
        self.requests, self.console, self.errors = [], [], []
        record = lambda request: self.requests.append(request.url)  # noqa: E731
        browser.on("request", record)
        self.page = browser.new_page()
        self.page.on("console", lambda message: self.console.append((message.type, message.text)))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        try:
            self.page.goto(self.url, wait_until="load")
            self.page.wait_for_load_state("networkidle")
        finally:
            browser.remove_listener("request", record)

    def console_errors(self):
        return [text for kind, text in self.console if kind == "error"] + self.errors


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_page_renders_with_every_plot_and_finding_and_fetches_nothing(name, browser, pages,
                                                                          tmp_path):
    visit = Visit(browser, pages[name])
    page = visit.page
    try:
        assert visit.requests == [visit.url], "requests besides the page itself"
        assert visit.console_errors() == []
        assert page.title().startswith("Overflow doctor")
        assert page.locator("h1").is_visible()
        plots = page.eval_on_selector_all("figure[id^='plot-']", "nodes => nodes.map(n => n.id)")
        assert plots == EXPECTED[name]["plots"]
        for plot in plots:
            figure = page.locator("#" + plot)
            figure.scroll_into_view_if_needed()
            assert figure.locator("figcaption").inner_text().strip()
            assert len(figure.locator("div.plot").get_attribute("aria-label")) > 30
            box = figure.locator("svg").first.bounding_box()
            assert box["width"] > 400 and box["height"] > 120, (plot, box)
            drawn = figure.locator("svg").first.evaluate(
                "svg => svg.querySelectorAll('path, use, text').length")
            assert drawn > 20, (plot, drawn)
        findings = page.eval_on_selector_all(
            "article[data-finding-id]", "nodes => nodes.map(n => n.dataset.findingId)")
        assert findings == EXPECTED[name]["findings"]
        for index in range(len(findings)):
            article = page.locator("article[data-finding-id]").nth(index)
            assert article.is_visible() and article.locator("h3").inner_text().strip()
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
        shot = tmp_path / (name + ".png")
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 20000, "a near-empty screenshot"
    finally:
        page.close()


def test_a_narrow_window_keeps_the_page_within_its_width(browser, pages):
    visit = Visit(browser, pages["masked_padding"])
    try:
        visit.page.set_viewport_size({"width": 420, "height": 800})
        assert visit.page.evaluate("document.documentElement.scrollWidth") <= 420
    finally:
        visit.page.close()


def test_the_checks_would_see_a_request(browser, pages, tmp_path):
    """Controls: an image from the network put into the page is caught, by the request record
    when the page has no content policy, by the policy's console error when it has one."""
    page_text = pages["clean"].read_text(encoding="utf-8")
    tracker = '<img src="http://127.0.0.1:9/pixel.png" alt="">'
    with_policy = tmp_path / "with_policy.html"
    with_policy.write_text(page_text.replace("</main>", tracker + "</main>"), encoding="utf-8")
    without = tmp_path / "without_policy.html"
    start = page_text.index('<meta http-equiv="Content-Security-Policy"')
    without.write_text(page_text[:start] + page_text[page_text.index(">", start) + 1:]
                       .replace("</main>", tracker + "</main>"), encoding="utf-8")
    visit = Visit(browser, without)
    visit.page.close()
    assert "http://127.0.0.1:9/pixel.png" in visit.requests
    visit = Visit(browser, with_policy)
    visit.page.close()
    assert any("Content Security Policy" in text for text in visit.console_errors()), visit.console
