"""The examples run and show what they claim."""
import importlib.util
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(relpath, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "..", relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_small_fp16_example_backs_off_from_2_pow_32_and_learns(capsys):
    example = _load("examples/train_small_fp16.py", "train_small_fp16")
    result = example.main(["--steps", "150", "--log-every", "50"])
    out = capsys.readouterr().out
    # Starting at 2**32 the first steps overflow in fp16 and are skipped...
    assert result["skipped"] >= 10
    assert result["applied"] + result["skipped"] == 150
    assert result["final_scale"] < 2.0 ** 32
    assert np.log2(result["final_scale"]) == int(np.log2(result["final_scale"]))
    # ...and training then works (4 classes: chance is 0.25).
    assert result["accuracy"] > 0.6
    assert "SKIPPED (overflow)" in out and "loss-scale trajectory" in out
