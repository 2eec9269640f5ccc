"""scripts/bench_async_step.py runs and prints both variants and their ratio (no timing asserted)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_benchmark_prints_both_variants_and_the_ratio():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "bench_async_step.py"), "--steps", "2",
         "--repeats", "1", "--layers", "1", "--width", "64"],
        capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^\s+sync\s+[\d.]+ ms/step$", result.stdout, re.M)
    assert re.search(r"^\s+async\s+[\d.]+ ms/step$", result.stdout, re.M)
    assert re.search(r"ratio async / sync = [\d.]+$", result.stdout, re.M)
