"""The examples of docs/guides/localisation.md ("Finding the overflow", once a README section)
run and print what their comments say."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _blocks():
    with open(os.path.join(ROOT, "docs", "guides", "localisation.md"), encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_readme_has_the_localisation_and_advisor_examples():
    assert len(_blocks()) == 2


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1], ids=["localisation", "advisor"])
def test_readme_finding_the_overflow_example_prints_what_it_says(index):
    code = _blocks()[index]
    expected = re.findall(r"^print\(.*\)\s+# (.+)$", code, re.M)[-1].strip()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="3", NPU_LOSS_SCALE_BACKEND="emulation")
    env.pop("NPU_LOSS_SCALE_LOCALISE", None)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == expected
