"""Runs the code blocks of one Markdown page of the documentation, as a reader would, through
Sybil's Markdown parsers; ``python tests/docs_pages.py PAGE`` runs one page in the current
directory (tests/test_docs_pages.py runs each page so, in a fresh process and a temporary
directory of its own) and prints one JSON line: what ran and what was skipped, and why.

What a page holds and what happens to it:

- a ```python block runs in the page's one namespace (a block continues the blocks above it);
  a line ``print(...)  # text`` must print exactly ``text``; ``>>>`` blocks are doctests;
- a ```python block whose first line is ``# NAME.py`` (``# train.py: ...``, ``# test_train.py,
  next to train.py``) is a file of the reader's: it is written to NAME.py, and a test file
  (``test_*.py``) is run with pytest there, beside the files written before it;
- a ```console block runs each ``$ npu-emulate ...`` (or ``$ python ...``) line and compares
  what the command prints with the lines below it;
- ``<!-- invisible-code-block: python ... -->`` runs without being shown (a page's set-up);
- ``<!-- skip: next "reason" -->``, ``<!-- skip: start if(stack.tf1, reason="...") -->`` ...
  ``<!-- skip: end -->`` skip blocks, always with a reason; ``stack`` (:class:`Stack`) says
  which TensorFlow runs.

The package's own deprecation warnings (its moved import paths) are errors in every block.
"""
import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import tokenize
import unittest
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# npu_loss_scale/_internal/moved.py: "npu_loss_scale.X is deprecated and will be removed in 0.4;
# use npu_loss_scale.Y instead", a DeprecationWarning, for every old import path and name
PACKAGE_DEPRECATION = r"npu_loss_scale\.\S+ is deprecated"


def pages():
    """README.md and every page under docs/ that has a block to run or a skip directive."""
    found = ["README.md"]
    for folder, dirs, files in os.walk(os.path.join(ROOT, "docs")):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".md"):
                found.append(os.path.relpath(os.path.join(folder, name), ROOT))
    return [page for page in found if _has_blocks(page)]


def _has_blocks(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    return any(mark in text for mark in ("```python", "```console", "invisible-code-block"))


class Stack:
    """What a skip directive's condition may ask about the TensorFlow the page runs on (read on
    first use: a page whose blocks are all skipped outright never imports TensorFlow)."""

    @property
    def tf_version(self):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return tuple(int(p) for p in tf.__version__.split(".")[:2])

    @property
    def tf1(self):
        return self.tf_version < (2, 0)

    @property
    def keras3(self):
        return not self.tf1 and _keras_major() >= 3

    @property
    def estimator(self):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return hasattr(tf.compat.v1, "estimator") and _importable("tensorflow_estimator")


def _keras_major():
    try:
        import keras  # pylint: disable=import-outside-toplevel
    except ImportError:
        return 2
    return int(keras.__version__.split(".")[0])


def _importable(name):
    import importlib.util  # pylint: disable=import-outside-toplevel
    return importlib.util.find_spec(name) is not None


def file_name(source):
    """NAME.py when the block's first line is ``# NAME.py`` (then ``:``, ``,`` or nothing)."""
    first = source.split("\n", 1)[0].strip()
    if not first.startswith("# "):
        return None
    word = first[2:].split()[0].rstrip(":,") if first[2:].split() else ""
    return word if word.endswith(".py") and word[:-3].isidentifier() else None


def commented_prints(source):
    """``{(row, col): text}`` of each statement ``print(...)  # text`` in ``source``: the position
    of its ``print`` name (rows from 1) and the comment that ends the statement's last line."""
    found = {}
    statement, previous = [], None
    ignored = (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.COMMENT)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NEWLINE:
            if (len(statement) > 1 and statement[0].string == "print"
                    and statement[0].type == tokenize.NAME and statement[1].string == "("
                    and previous is not None and previous.type == tokenize.COMMENT):
                found[statement[0].start] = previous.string[1:].strip()
            statement = []
        elif tok.type not in ignored:
            statement.append(tok)
        previous = tok
    return found


class _Print:
    """Stands in for ``print`` in one commented statement: prints, and keeps what it printed."""

    def __init__(self):
        self.printed = []

    def __call__(self, *args, **kwargs):
        if kwargs.get("file") is not None:
            return print(*args, **kwargs)
        buffer = io.StringIO()
        print(*args, file=buffer, **kwargs)
        self.printed.append(buffer.getvalue())
        sys.stdout.write(buffer.getvalue())
        return None


class PageRun:
    """The evaluators of one page's blocks, and what they did."""

    def __init__(self, page):
        self.page = page
        self.ran = []        # (line, kind)
        self.skipped = []    # (line, reason)
        self._evaluated = set()

    # ```python blocks (and invisible ones)
    def python(self, example):
        self._evaluated.add(id(example.region))
        source = str(example.parsed)
        line = example.line + example.parsed.line_offset
        name = file_name(source)
        if name is not None:
            with open(name, "w", encoding="utf-8") as f:
                f.write(source)
            if name.startswith("test_"):
                self._pytest(name, example.line)
            self.ran.append((example.line, "file " + name))
            return
        self._run(source, line, example)
        self.ran.append((example.line, "python"))

    def _run(self, source, line, example):
        prints = commented_prints(source)
        lines = source.split("\n")
        stand_ins = {}
        # replace each commented statement's ``print`` by a name of its own (same line numbers)
        for k, ((row, col), _) in enumerate(sorted(prints.items(), reverse=True)):
            name = "_docs_print_%d_" % k
            text = lines[row - 1]
            lines[row - 1] = text[:col] + name + text[col + len("print"):]
            stand_ins[(row, col)] = name
        namespace = example.namespace
        recorders = {name: _Print() for name in stand_ins.values()}
        namespace.update(recorders)
        try:
            code = compile("\n" * line + "\n".join(lines), example.path, "exec",
                           dont_inherit=True)
            exec(code, namespace)  # pylint: disable=exec-used
        finally:
            for name in recorders:
                namespace.pop(name, None)
            namespace.pop("__builtins__", None)
        for (row, col), expected in sorted(prints.items()):
            printed = recorders[stand_ins[(row, col)]].printed
            where = "%s line %d" % (self.page, line + row)
            if not printed:
                raise AssertionError("%s: this print never ran; the page says it prints %r"
                                     % (where, expected))
            got = "".join(printed).rstrip("\n")
            if got != expected:
                raise AssertionError("%s printed\n  %r\nwhere the page says\n  %r"
                                     % (where, got, expected))

    def _pytest(self, name, line):
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name],
            capture_output=True, text=True, env=_child_env(), check=False, timeout=600)
        if result.returncode != 0:
            raise AssertionError("%s line %d: pytest %s failed (exit %d):\n%s\n%s" % (
                self.page, line, name, result.returncode, result.stdout[-4000:],
                result.stderr[-3000:]))

    # ```console blocks
    def console(self, example):
        self._evaluated.add(id(example.region))
        commands = []
        for text in str(example.parsed).rstrip("\n").split("\n"):
            if text.startswith("$ "):
                commands.append((text[2:], []))
            elif commands:
                commands[-1][1].append(text)
            else:
                raise AssertionError("%s line %d: a console block starts with '$ command'"
                                     % (self.page, example.line))
        for command, expected in commands:
            argv = _argv(command, self.page, example.line)
            result = subprocess.run(argv, capture_output=True, text=True, env=_child_env(),
                                    check=False, timeout=600)
            if result.returncode != 0:
                raise AssertionError("%s line %d: '%s' exited with %d:\n%s" % (
                    self.page, example.line, command, result.returncode, result.stderr[-3000:]))
            got = result.stdout.rstrip("\n").split("\n") if result.stdout.strip() else []
            if got != expected:
                raise AssertionError("%s line %d: '%s' printed\n%s\nwhere the page shows\n%s" % (
                    self.page, example.line, command, "\n".join(got), "\n".join(expected)))
        self.ran.append((example.line, "console"))

    def was_evaluated(self, example):
        return id(example.region) in self._evaluated


def _argv(command, page, line):
    words = shlex.split(command)
    if words and words[0] == "npu-emulate":
        script = os.path.join(os.path.dirname(sys.executable), "npu-emulate")
        head = [script] if os.path.exists(script) else [sys.executable, "-m",
                                                         "npu_loss_scale.emulate"]
        return head + words[1:]
    if words and words[0] in ("python", "python3"):
        return [sys.executable] + words[1:]
    raise AssertionError("%s line %d: the console block runs '%s'; only npu-emulate and python "
                         "commands are run (mark the block '<!-- skip: next \"reason\" -->')"
                         % (page, line, command))


def _child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONWARNINGS"] = "error:npu_loss_scale.:DeprecationWarning"
    return env


def parse(page, run):
    """The page as a Sybil document whose code blocks ``run`` evaluates."""
    # pylint: disable=import-outside-toplevel
    from sybil import Sybil
    from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

    class PythonBlocks(PythonCodeBlockParser):
        """Sybil's Python blocks (doctests included), the plain ones run by ``run.python``."""

        def __init__(self):
            super().__init__()
            self.codeblock_parser = CodeBlockParser("python", run.python)

    sybil = Sybil(parsers=[PythonBlocks(), CodeBlockParser("console", run.console), SkipParser()])
    return sybil.parse(_path(page))


def _path(page):
    from pathlib import Path  # pylint: disable=import-outside-toplevel
    return Path(ROOT) / page   # an absolute ``page`` stays as it is


def block_sources(page, language, section=None):
    """The sources of ``page``'s ```language blocks, as Sybil's Markdown lexer reads them; with
    ``section`` (a heading line, "## Quick start"), only those under that heading."""
    # pylint: disable=import-outside-toplevel
    from sybil import Document
    from sybil.parsers.markdown import CodeBlockParser
    document = Document.parse(str(_path(page)), CodeBlockParser(language, lambda example: None))
    start, end = 0, len(document.text)
    if section is not None:
        start = document.text.index("\n%s\n" % section)
        level = section.split(" ", 1)[0]
        following = document.text.find("\n%s " % level, start + 1)
        end = following if following >= 0 else end
    return [str(example.parsed) for example in document if start <= example.start < end]


def run_page(page):
    """Evaluates every example of ``page`` in order in this process; returns the PageRun."""
    warnings.filterwarnings("error", message=PACKAGE_DEPRECATION, category=DeprecationWarning)
    run = PageRun(page)
    document = parse(page, run)
    document.namespace["stack"] = Stack()
    for example in document:
        is_skip = type(example.region.evaluator).__name__ == "Skipper"
        if is_skip:
            _check_skip(page, example)
        try:
            example.evaluate()
        except unittest.SkipTest as skip:
            run.skipped.append((example.line, str(skip)))
            continue
        if not is_skip and not run.was_evaluated(example) and \
                not type(example.region.evaluator).__name__.startswith("DocTest"):
            raise AssertionError("%s line %d: the block was neither run nor skipped with a reason"
                                 % (page, example.line))
        if type(example.region.evaluator).__name__.startswith("DocTest"):
            run.ran.append((example.line, "doctest"))
    return run


def _check_skip(page, example):
    """Every skip says why: ``skip: next "reason"`` or ``skip: next if(condition, reason="...")``."""
    action, reason = example.parsed
    reason = (reason or "").strip()
    if action not in ("start", "next"):
        return
    if not reason or (reason.startswith("if") and "reason=" not in reason):
        raise AssertionError("%s line %d: 'skip: %s' without a reason; say why, e.g. <!-- skip: "
                             "next \"needs an Ascend device\" --> or <!-- skip: next if(stack.tf1, "
                             "reason=\"...\") -->" % (page, example.line, action))


def main(argv):
    page = argv[1]
    with contextlib.redirect_stdout(sys.stderr):   # the blocks' output, apart from the verdict
        run = run_page(page)
    print(json.dumps({"page": page, "ran": run.ran, "skipped": run.skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
