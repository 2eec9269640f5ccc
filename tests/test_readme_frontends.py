"""The TF2 front-end guides' examples (docs/guides/grad-scaler.md, docs/guides/keras.md; they
were the README's until it became a short front door) run and print what their comments say."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


PAGES = ("docs/guides/grad-scaler.md", "docs/guides/keras.md")


def _blocks():
    blocks = []
    for page in PAGES:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            blocks += re.findall(r"```python\n(.*?)```", f.read(), re.S)
    return blocks


def test_the_guides_have_the_three_front_end_examples():
    assert len(_blocks()) == 3


@pytest.mark.parametrize("index", [0, 1, 2], ids=["grad_scaler", "optimizer_thread", "keras"])
@pytest.mark.slow
def test_readme_front_end_example_prints_what_it_says(index):
    code = _blocks()[index]
    expected = re.findall(r"^print\(.*\)\s+# (.+)$", code, re.M)[-1].strip()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="3", NPU_LOSS_SCALE_BACKEND="emulation")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == expected
