"""The README's quick start runs as written and prints what it says.

Its first block is an Ascend script (``train.py``); the console block after it is the command
that runs it on a CPU and that command's output; the second block is a pytest test of it (run
by tests/test_pytest_plugin.py); each later block ends in a ``print(...)  # expected output``
line. docs/getting-started.md shows the same ``train.py`` and command: they must not drift apart.
"""
import json
import os
import re
import subprocess
import sys

from tf_versions import tf2_only

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "---- end of block ----"


def _read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def quick_start():
    """The README's quick start section: its Python blocks and its console block."""
    text = _read("README.md")
    start = text.index("## Quick start")
    section = text[start:text.index("\n## ", start + 1)]
    return (re.findall(r"```python\n(.*?)```", section, re.S),
            re.findall(r"```console\n(.*?)```", section, re.S))


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                TF_CPP_MIN_LOG_LEVEL="3", NPU_LOSS_SCALE_BACKEND="emulation")


def test_getting_started_shows_the_readme_script_and_command():
    blocks, consoles = quick_start()
    page = _read("docs", "getting-started.md")
    assert re.findall(r"```python\n(.*?)```", page, re.S) == blocks[:1]
    assert re.findall(r"```console\n(.*?)```", page, re.S) == consoles


def test_the_readme_command_runs_the_readme_script_as_shown(tmp_path):
    blocks, consoles = quick_start()
    assert len(consoles) == 1
    command, *expected = consoles[0].strip().splitlines()
    assert command.startswith("$ npu-emulate "), command
    # npu-emulate is the console script of ``python -m npu_loss_scale.emulate``, which a checkout
    # run without installing the package has as well.
    args = command.split()[2:]
    (tmp_path / "train.py").write_text(blocks[0], encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate"] + args,
                            capture_output=True, text=True, env=_env(), cwd=tmp_path,
                            check=False, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines() == expected


@tf2_only  # its GradScaler and Keras snippets are TF2 code; the graph ones run on 1.15 below
def test_the_readme_snippets_print_what_their_comments_say(tmp_path):
    """Each snippet after the pytest test, in one process, each in a namespace of its own."""
    snippets = quick_start()[0][2:]
    assert len(snippets) == 4   # NPULossScaleOptimizer, GradScaler, Keras, Megatron
    _assert_snippets_print_what_their_comments_say(snippets, tmp_path)


def test_the_readme_graph_snippets_print_what_their_comments_say_on_every_stack(tmp_path):
    """The snippets written as TF1 graphs with a Session (NPULossScaleOptimizer's, Megatron's):
    what a TensorFlow 1.15 user of the quick start runs, after the script and its test."""
    snippets = [code for code in quick_start()[0][2:] if "tf.Graph().as_default()" in code]
    assert len(snippets) == 2   # NPULossScaleOptimizer, Megatron
    _assert_snippets_print_what_their_comments_say(snippets, tmp_path)


def _assert_snippets_print_what_their_comments_say(snippets, tmp_path):
    expected = [re.findall(r"^\s*print\(.*\)\s+# (.+)$", code, re.M)[-1].strip()
                for code in snippets]
    runner = ("import json, sys\n"
              "for i, code in enumerate(json.load(open(sys.argv[1]))):\n"
              "    exec(compile(code, 'README quick start', 'exec'), {'__name__': '__main__'})\n"
              "    print(" + repr(MARK) + ", flush=True)\n")
    (tmp_path / "snippets.json").write_text(json.dumps(snippets), encoding="utf-8")
    result = subprocess.run([sys.executable, "-c", runner, str(tmp_path / "snippets.json")],
                            capture_output=True, text=True, env=_env(), cwd=tmp_path,
                            check=False, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = result.stdout.split(MARK + "\n")[:-1]
    assert [out.strip().splitlines()[-1] for out in outputs] == expected
