"""The doctor's HTML page (npu_loss_scale.tools.doctor.html.write_html), read back with the
standard library's HTML parser: its structure, that it is self-contained, every plot and finding
of the report, the markers of the skipped steps and overflow sites, every outcome, and the
escaping of user text. The reports are written by hand (tests/doctor_reports.py); the same pages
in a real browser: test_doctor_browser.py. No TensorFlow."""
import json
import os
import subprocess
import sys
from html.parser import HTMLParser

import pytest

import doctor_reports
from doctor_reports import EXPECTED, HOSTILE, REPORTS

pytest.importorskip("jinja2", reason="the doctor's page needs Jinja2 (the [doctor] extra)")

from npu_loss_scale.tools.doctor.html import render_html, write_html  # noqa: E402 pylint: disable=wrong-import-position

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Node:
    """One element of the parsed page."""

    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.parts = tag, attrs, parent, [], []

    def text(self, sep=""):
        """The text inside, each element's joined to its neighbours' by ``sep``."""
        return sep.join(part if isinstance(part, str) else part.text(sep) for part in self.parts)

    def iter(self):
        for child in self.children:
            yield child
            yield from child.iter()

    def find_all(self, tag=None, **attrs):
        return [node for node in self.iter()
                if (tag is None or node.tag == tag)
                and all(node.attrs.get(k.rstrip("_")) == v for k, v in attrs.items())]

    def find(self, tag=None, **attrs):
        found = self.find_all(tag, **attrs)
        assert len(found) == 1, "expected one <%s %s>, found %d" % (tag, attrs, len(found))
        return found[0]

    def classes(self):
        return (self.attrs.get("class") or "").split()


class TreeBuilder(HTMLParser):
    """A tree of the page that refuses an end tag which does not close the open element."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.current = Node("#root", {}, None)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        self.current.parts.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        self.current.parts.append(node)

    def handle_endtag(self, tag):
        assert tag not in VOID, "</%s> closes a void element" % tag
        assert self.current.tag == tag, "</%s> closes <%s>" % (tag, self.current.tag)
        self.current = self.current.parent

    def handle_data(self, data):
        self.current.parts.append(data)


def parse(page):
    builder = TreeBuilder()
    builder.feed(page)
    builder.close()
    assert builder.current is builder.root, "<%s> is never closed" % builder.current.tag
    return builder.root


_PAGES = {}


def page_of(name):
    """The parsed page of one hand-written report (rendered once per session)."""
    if name not in _PAGES:
        _PAGES[name] = render_html(REPORTS[name]())
    return _PAGES[name], parse(_PAGES[name])


def marker_count(root, group_id):
    """The marks drawn in one SVG group: <use> and <path> elements outside its <defs>."""
    groups = root.find_all("g", id=group_id)
    if not groups:
        return 0
    (group,) = groups
    defs = {id(node) for d in group.find_all("defs") for node in d.iter()}
    return sum(1 for node in group.iter() if node.tag in ("use", "path") and id(node) not in defs)


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_the_page_is_one_self_contained_document(name):
    page, root = page_of(name)
    assert page.startswith("<!DOCTYPE html>")
    html = root.find("html")
    assert html.attrs["lang"] == "en"
    assert root.find("title").text().startswith("Overflow doctor")
    assert len(root.find_all("h1")) == 1 and root.find("main")
    policy = root.find("meta", **{"http-equiv": "Content-Security-Policy"}).attrs["content"]
    assert "default-src 'none'" in policy
    assert not root.find_all("script"), "the page runs no script"
    assert not [n for n in root.find_all("link") if n.attrs.get("rel") != "icon"]
    for node in root.iter():  # nothing to fetch: in-page anchors and data: URLs only
        for attribute in ("src", "href", "xlink:href", "action", "poster"):
            value = node.attrs.get(attribute)
            if value is not None:
                assert value.startswith(("#", "data:")), (node.tag, attribute, value)
    assert "url(http" not in page and "@import" not in page
    ids = [node.attrs["id"] for node in root.iter() if "id" in node.attrs]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_plot_is_an_inline_svg_with_a_title_and_a_text_alternative(name):
    _, root = page_of(name)
    figures = [node for node in root.find_all("figure") if node.attrs.get("id", "").startswith("plot-")]
    assert [f.attrs["id"] for f in figures] == EXPECTED[name]["plots"]
    for figure in figures:
        assert figure.find("figcaption").text().strip()
        (holder,) = [n for n in figure.find_all("div") if "plot" in n.classes()]
        assert holder.attrs["role"] == "img" and len(holder.attrs["aria-label"]) > 30
        svg = holder.find("svg")
        assert len(list(svg.iter())) > 50, "%s: an empty figure" % figure.attrs["id"]
        assert svg.find_all("text"), "%s: no axis text" % figure.attrs["id"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_plots_mark_each_skipped_step_and_each_overflow_cell(name):
    _, root = page_of(name)
    counts = {group: marker_count(root, group) for group in EXPECTED[name]["markers"]}
    assert counts == EXPECTED[name]["markers"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_finding_is_on_the_page_in_severity_order(name):
    _, root = page_of(name)
    articles = root.find_all("article")
    assert [a.attrs["data-finding-id"] for a in articles] == EXPECTED[name]["findings"]
    report = REPORTS[name]()
    for article in articles:
        (finding,) = [f for f in report["findings"] if f["id"] == article.attrs["data-finding-id"]]
        assert article.find("h3").text() == finding["title"]
        badge = [n for n in article.find_all("span") if "badge" in n.classes()][0]
        assert badge.text() == finding["severity"]
        if finding.get("evidence"):
            assert finding["evidence"] in article.text()
    if not EXPECTED[name]["findings"]:
        assert root.find(id="no-findings")


def test_a_keep_fp32_fix_shows_its_mixlist_json_its_edit_and_its_verified_effect():
    _, root = page_of("metric_overflow")
    article = root.find("article")
    assert json.loads(article.find("pre", class_="mixlist").text()) == \
        doctor_reports.MIXLIST_EXP
    assert article.find("pre", class_="code").text() == doctor_reports.KEEP_DTYPE_EDIT
    effect = article.find("p", class_="effect").text()
    assert "4 \u2192 0" in effect and "of 4" in effect and "saturation" in effect
    assert "Applies without editing the script." in article.text()


def test_a_setting_fix_shows_the_setting_and_a_code_edit_says_it_needs_one():
    _, root = page_of("wasted_start")
    article = root.find("article")
    assert article.find("pre", class_="settings").text() == "init_loss_scale = 2^15 (32768)"
    assert "5 \u2192 0" in article.find("p", class_="effect").text()
    _, root = page_of("masked_padding")
    (edit,) = root.find_all("article", **{"data-finding-id": "harmful-overflow/pad/Log"})
    assert "Needs an edit of the script." in edit.text()
    assert edit.find("pre", class_="code").text().startswith("-    y = tf.where")
    assert not edit.find_all("section", class_="verified")


def test_the_sites_table_gives_each_mode_its_verdict_and_method():
    _, root = page_of("masked_padding")
    table = root.find("table", id="sites-table")
    header = [th.text() for th in table.find("thead").find_all("th")]
    assert header[-2:] == ["saturation mode", "INF/NaN mode"]
    rows = {tr.attrs["data-site"]: tr for tr in table.find("tbody").find_all("tr")}
    assert sorted(rows) == ["dense/grad/MatMul", "pad/Log"]

    def cell(site, mode):
        (td,) = rows[site].find_all("td", **{"data-mode": mode})
        return " ".join(td.text(" ").split())
    assert cell("pad/Log", "saturation").startswith("benign decided by replay steps 1\u20133")
    assert cell("pad/Log", "inf_nan").startswith("harmful decided by reachability+replay")
    assert "0 * inf = NaN" in cell("pad/Log", "inf_nan")
    # the MatMul overflowed only in INF/NaN mode: the saturation run has no verdict for it
    assert cell("dense/grad/MatMul", "saturation") == "no verdict"
    assert "steps 1 " in cell("dense/grad/MatMul", "inf_nan") + " "


def test_the_header_says_the_script_command_stack_outcome_and_mode():
    _, root = page_of("wasted_start")
    assert root.find("code", id="command").text() == \
        "npu-loss-scale doctor --steps 8 --mode saturation bert.py"
    assert root.find(id="outcome").text() == "step limit"
    assert " ".join(root.find(id="mode").text().split()) == \
        "saturation, from option: npu-loss-scale doctor --mode saturation"
    facts = " ".join(root.find("dl").text().split())
    assert "tensorflow 2.15.1, python 3.11.7" in facts
    assert "init_loss_scale=2^20 (1048576)" in facts
    runs = root.find("section", id="runs").find("tbody").find_all("tr")
    assert [" ".join(tr.text(" ").split()) for tr in runs] == [
        "saturation mode step limit 8 5 3 6 2^20 (1048576) \u2192 2^15 (32768)"]


def test_a_crashed_run_shows_its_detail_and_says_there_is_nothing_else():
    _, root = page_of("crashed")
    assert root.find(id="outcome").text() == "crashed"
    assert "ValueError: Shapes (None, 10) and (None, 5) are incompatible" in \
        root.find("pre", id="outcome-detail").text()
    assert "none was built" in root.find("dl").text()
    assert root.find(id="no-findings").text() == "No finding: no step was run."
    assert root.find(id="no-sites").text() == "No step was run, so no op could overflow."
    assert "No step was run" in root.find("section", id="loss-scale").text()


def test_no_loss_scale_optimizer_and_a_clean_run_in_one_mode():
    _, root = page_of("no_loss_scale_optimizer")
    assert root.find(id="outcome").text() == "no loss scale optimizer"
    assert root.find(id="no-runs")
    _, root = page_of("clean")
    assert " ".join(root.find(id="mode").text().split()) == \
        "INF/NaN, from environment: NPU_LOSS_SCALE_SAT_MODE=inf_nan"
    article = root.find("article")
    assert article.attrs["data-finding-id"] == "clean"
    assert not article.find_all("section"), "a clean finding has no fix"
    assert [th.text() for th in root.find("section", id="runs").find("tbody").find_all("th")] == \
        ["INF/NaN mode"]


def test_missing_keys_unknown_keys_and_inf_nan_strings():
    page, root = page_of("sparse")
    assert "a_later_key" not in page and "new_step_key" not in page
    assert "inf" in root.find("section", id="runs").text()
    row = root.find("tr", **{"data-site": "a/b"})
    assert "NaN" in row.text() and "no verdict" in row.text()
    assert root.find(id="outcome").text() == "stopped"
    assert "unknown" in root.find("dl").text()


def test_user_text_is_escaped_everywhere():
    page, root = page_of("hostile")
    assert not root.find_all("script")
    assert not [n for n in root.find_all("img")], "no element may come from the report's text"
    assert HOSTILE in root.find("pre", id="outcome-detail").text()
    assert HOSTILE in root.find("h1").text()
    article = root.find("article")
    assert article.attrs["data-finding-id"] == "benign/" + HOSTILE
    assert article.find("h3").text() == HOSTILE
    assert article.find("pre", class_="code").text() == HOSTILE
    assert "<script>alert" not in page


def test_the_same_report_makes_the_same_page_and_write_html_writes_it(tmp_path):
    path = tmp_path / "doctor.html"
    write_html(doctor_reports.wasted_start(), str(path))  # a second rendering of this report
    assert path.read_text(encoding="utf-8") == page_of("wasted_start")[0]
    write_html(doctor_reports.crashed(), path)  # an os.PathLike too
    assert path.read_text(encoding="utf-8") == page_of("crashed")[0]


@pytest.mark.parametrize("report, path, error, words", [
    ([doctor_reports.clean()], "x.html", TypeError, ["report must be a dict", "got list"]),
    (dict(doctor_reports.clean(), schema="other/report"), "x.html", ValueError,
     ["report['schema'] is 'other/report'", "npu-loss-scale/doctor-report"]),
    (doctor_reports.clean(), 3, TypeError, ["path must be a file path", "got 3"]),
])
def test_bad_input_is_refused_naming_the_argument(report, path, error, words, tmp_path):
    with pytest.raises(error) as raised:
        write_html(report, path if not isinstance(path, str) else str(tmp_path / path))
    for word in words:
        assert word in str(raised.value)


def test_an_unwritable_path_raises_the_os_error(tmp_path):
    with pytest.raises(OSError):
        write_html(doctor_reports.clean(), str(tmp_path / "no-such-folder" / "doctor.html"))


def test_without_jinja2_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ImportError) as raised:
        write_html(doctor_reports.clean(), "unused.html")
    assert "pip install 'npu-loss-scale[doctor]'" in str(raised.value)


def test_importing_the_page_module_imports_neither_jinja2_nor_matplotlib():
    code = ("import sys; import npu_loss_scale.tools.doctor.html; "
            "print(sorted(m for m in ('jinja2', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.PIPE,
                         universal_newlines=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.stdout.strip() == "[]"


def test_a_grid_of_many_cells_is_one_embedded_image(monkeypatch):
    from npu_loss_scale.tools.doctor import html_plots  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(html_plots, "MAX_VECTOR_CELLS", 3)  # masked_padding's grids: 3 and 4
    root = parse(render_html(REPORTS["masked_padding"]()))
    assert marker_count(root, "plot-sites-saturation-cells") == 3
    assert not root.find_all(id="plot-sites-inf_nan-cells")
    (image,) = root.find("figure", id="plot-sites-inf_nan").find_all("image")
    assert image.attrs["xlink:href"].startswith("data:image/png;base64,")
    assert not root.find("figure", id="plot-sites-saturation").find_all("image")
