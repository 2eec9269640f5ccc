"""The README's TF2 front-end examples run and print what their comments say."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("### TF2 loops: a torch-style `GradScaler`")
    keras = text.index("### Keras: `npu_loss_scale.keras.NpuLossScaleOptimizer`", start)
    end = text.find("\n### ", keras + 1)   # the front-end sections end at the next one
    section = text[start:end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_has_the_three_front_end_examples():
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
