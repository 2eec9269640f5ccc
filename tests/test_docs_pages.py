"""Every code block of README.md and docs/ runs as written, on the stacks its page claims, and
prints what the page says it prints (tests/docs_pages.py: Sybil's Markdown parsers, each page in
a fresh process and a temporary directory). Blocks skipped on this stack, and why, are listed
in the session's summary ("documentation blocks")."""
import json
import os
import subprocess
import sys
import warnings

import pytest

import docs_pages

PAGES = docs_pages.pages()


def test_the_docs_have_blocks_to_run():
    # new pages are found by themselves; these are pages known to have Python blocks
    for page in ("README.md", "docs/getting-started.md", "docs/guides/megatron.md",
                 "docs/guides/localisation.md", "docs/guides/grad-scaler.md"):
        assert page in PAGES


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_page_blocks_run_and_print_what_the_page_says(page, tmp_path, record_property):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    # as a reader runs them: the backend and localisation as the package chooses by default
    for name in ("NPU_LOSS_SCALE_BACKEND", "NPU_LOSS_SCALE_LOCALISE"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, os.path.join(docs_pages.ROOT, "tests",
                                                          "docs_pages.py"), page],
                            capture_output=True, text=True, env=env, cwd=str(tmp_path),
                            check=False, timeout=900)
    assert result.returncode == 0, "%s:\n%s" % (page, result.stderr[-6000:])
    verdict = json.loads(result.stdout.strip().splitlines()[-1])
    record_property("docs_blocks", verdict)
    assert verdict["ran"] or verdict["skipped"], "%s has no block Sybil found" % page


# The harness itself: a page that is wrong fails, and says where.

def _run_page(tmp_path, monkeypatch, text):
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        return docs_pages.run_page(str(page))


OK_PAGE = """
<!-- invisible-code-block: python
x = 6
-->

```python
y = x * 7
print(y, "and", y / 4)      # 42 and 10.5
for k in range(2):
    print(k)
```

<!-- skip: next if(stack.tf1 is None, reason="never true") -->
```python
print([y] * 2)  # [42, 42]
```

<!-- skip: next "shows a fragment" -->
```python
undefined_name()
```
"""


def test_a_right_page_runs_its_blocks_in_one_namespace(tmp_path, monkeypatch):
    run = _run_page(tmp_path, monkeypatch, OK_PAGE)
    assert [kind for _, kind in run.ran] == ["python"] * 3
    assert run.skipped == [(19, "shows a fragment")]


@pytest.mark.parametrize("wrong, message", [
    ("# 42 and 10.5", r"page\.md line 8 printed\n  '42 and 10\.5'\nwhere the page says\n  '42 and 10\.50'"),
    ("# [42, 42]", r"page\.md line 15 printed\n  '\[42, 42\]'\nwhere the page says\n  '\[42,42\]'"),
], ids=["float", "list"])
def test_a_print_that_differs_from_its_comment_fails(tmp_path, monkeypatch, wrong, message):
    text = OK_PAGE.replace(wrong, {"# 42 and 10.5": "# 42 and 10.50",
                                   "# [42, 42]": "# [42,42]"}[wrong])
    with pytest.raises(AssertionError, match=message):
        _run_page(tmp_path, monkeypatch, text)


def test_a_commented_print_that_never_runs_fails(tmp_path, monkeypatch):
    text = "```python\nif False:\n    print(1)  # 1\n```\n"
    with pytest.raises(AssertionError, match="line 3: this print never ran; the page says it "
                                             "prints '1'"):
        _run_page(tmp_path, monkeypatch, text)


@pytest.mark.parametrize("directive", ['<!-- skip: next -->',
                                       '<!-- skip: next if(stack.tf1 is not None) -->'],
                         ids=["bare", "condition-only"])
def test_a_skip_without_a_reason_fails(tmp_path, monkeypatch, directive):
    with pytest.raises(AssertionError, match="line 1: 'skip: next' without a reason"):
        _run_page(tmp_path, monkeypatch, directive + "\n```python\nprint(1)\n```\n")


def test_the_packages_deprecations_are_errors_in_a_block(tmp_path, monkeypatch):
    text = ("```python\nfrom npu_loss_scale._internal import moved\n"
            "moved.warn_moved('npu_loss_scale.policy', 'npu_loss_scale.scaling.managers')\n```\n")
    with pytest.raises(DeprecationWarning, match="npu_loss_scale.policy is deprecated"):
        _run_page(tmp_path, monkeypatch, text)
    # other packages' deprecations are theirs: the block runs
    text = "```python\nimport warnings\nwarnings.warn('old', DeprecationWarning)\n```\n"
    assert _run_page(tmp_path, monkeypatch, text).ran == [(1, "python")]


def test_a_console_block_compares_what_the_command_prints(tmp_path, monkeypatch):
    text = "```console\n$ python -c \"print(6 * 7)\"\n%s\n```\n"
    assert _run_page(tmp_path, monkeypatch, text % "42").ran == [(1, "console")]
    with pytest.raises(AssertionError, match="line 1: 'python -c \"print\\(6 \\* 7\\)\"' printed\n42\n"
                                             "where the page shows\n41"):
        _run_page(tmp_path, monkeypatch, text % "41")
    with pytest.raises(AssertionError, match="only npu-emulate and python commands are run"):
        _run_page(tmp_path, monkeypatch, "```console\n$ ls\n```\n")


@pytest.mark.slow   # a pytest run in a process of its own
def test_a_file_block_is_written_and_a_test_file_is_run(tmp_path, monkeypatch):
    text = ("```python\n# helper.py: a module\nVALUE = 3\n```\n\n"
            "```python\n# test_helper.py, next to helper.py\nimport helper\n\n"
            "def test_value():\n    assert helper.VALUE == %d\n```\n")
    run = _run_page(tmp_path, monkeypatch, text % 3)
    assert run.ran == [(1, "file helper.py"), (6, "file test_helper.py")]
    assert (tmp_path / "helper.py").read_text(encoding="utf-8").startswith("# helper.py")
    with pytest.raises(AssertionError, match="line 6: pytest test_helper.py failed"):
        _run_page(tmp_path, monkeypatch, text % 4)


def test_a_doctest_block_compares_its_output(tmp_path, monkeypatch):
    text = "```python\n>>> x = 6\n>>> x * 7\n%s\n```\n"
    assert _run_page(tmp_path, monkeypatch, text % "42").ran == [(2, "doctest"), (3, "doctest")]
    with pytest.raises(AssertionError, match="Expected:\n    41\nGot:\n    42"):
        _run_page(tmp_path, monkeypatch, text % "41")
