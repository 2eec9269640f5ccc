"""Runs Keras's own tests of its LossScaleOptimizer against npu_loss_scale.keras.

    python scripts/run_keras_lso_tests.py                      # Keras 3: the installed test file
    python scripts/run_keras_lso_tests.py --test-file PATH     # Keras 2.15: its test file
    python scripts/run_keras_lso_tests.py --against keras      # Keras's own class (the baseline)

Keras 3 installs its tests (``keras/src/optimizers/loss_scale_optimizer_test.py``) and that file
is used unless ``--test-file`` is given. The Keras 2.15 wheel ships none: pass the file
``mixed_precision/loss_scale_optimizer_test.py`` of Keras 2.15's source (tf-keras's tag
``v2.15.0``, where the package is ``tf_keras``: its imports are read as ``keras.src``).

The test module is copied at run time into a temporary folder, its import of Keras's
loss-scale optimizer is replaced by the package's class (with ``--against ours``, the default),
and pytest runs it there; nothing of Keras's test source is kept. The detection backend of the
package's class is the usual one (``NPU_LOSS_SCALE_BACKEND``: ``emulation`` off the device by
default, or ``inf_nan``). The last line printed is ``passed N failed M errors E skipped S``;
``--list-failures`` prints the failing test ids before it.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Keras 2: the test module imports the module ``loss_scale_optimizer`` and builds its classes from
# it. The stand-in module has the package's classes under Keras's names, everything else as is.
_KERAS2_STAND_IN = '''"""Keras 2's loss_scale_optimizer module with the package's classes under Keras's names."""
import types

from keras.src.mixed_precision import loss_scale_optimizer as _keras_module
from npu_loss_scale.keras import NpuLossScaleOptimizer as _Ours

loss_scale_optimizer = types.ModuleType(_keras_module.__name__)
loss_scale_optimizer.__dict__.update(vars(_keras_module))
loss_scale_optimizer.BaseLossScaleOptimizer = _Ours
loss_scale_optimizer.LossScaleOptimizerV3 = _Ours
loss_scale_optimizer.LossScaleOptimizer = _Ours._npu_legacy_class
'''

_KERAS2_IMPORT = re.compile(r"^from keras\.src\.mixed_precision import loss_scale_optimizer$",
                            re.M)
_KERAS3_IMPORT = re.compile(
    r"^from keras\.src\.optimizers\.loss_scale_optimizer import LossScaleOptimizer$", re.M)


def installed_keras3_test():
    """The Keras 3 test file installed with Keras, or None (Keras 2 ships no tests)."""
    import keras  # pylint: disable=import-outside-toplevel
    path = os.path.join(os.path.dirname(keras.__file__), "src", "optimizers",
                        "loss_scale_optimizer_test.py")
    return path if os.path.exists(path) else None


def repoint(source, against):
    """The test module's text, its loss-scale optimizer import pointed at ``against``.

    Returns (text, extra files {name: text} to write beside it)."""
    source = re.sub(r"\btf_keras\b(?!\.src)", "keras.src", source)   # tf-keras's layout of 2.15
    if _KERAS2_IMPORT.search(source):
        if against == "keras":
            return source, {}
        text = _KERAS2_IMPORT.sub("from npu_lso_stand_in import loss_scale_optimizer", source)
        return text, {"npu_lso_stand_in.py": _KERAS2_STAND_IN}
    if _KERAS3_IMPORT.search(source):
        if against == "keras":
            return source, {}
        text = _KERAS3_IMPORT.sub(
            "from npu_loss_scale.keras import NpuLossScaleOptimizer as LossScaleOptimizer", source)
        return text, {}
    raise SystemExit("the test file imports no Keras loss-scale optimizer this script knows "
                     "(expected 'from keras.src.mixed_precision import loss_scale_optimizer' or "
                     "'from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer')")


def count(output):
    """{'passed': N, 'failed': M, 'errors': E, 'skipped': S} from pytest's summary line."""
    found = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    summary = [line for line in output.splitlines()
               if re.search(r"\d+ (passed|failed|errors?|skipped)\b.* in [\d.]+s", line)]
    for number, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)",
                                   summary[-1] if summary else ""):
        found["errors" if word.startswith("error") else word] = int(number)
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--test-file", help="Keras's loss_scale_optimizer_test.py (default: the "
                                            "one installed with Keras 3)")
    parser.add_argument("--against", choices=("ours", "keras"), default="ours")
    parser.add_argument("--list-failures", action="store_true")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    args = parser.parse_args(argv)
    path = args.test_file or installed_keras3_test()
    if path is None:
        parser.error("this Keras installs no loss-scale optimizer tests (Keras 2): pass "
                     "--test-file with Keras 2.15's mixed_precision/loss_scale_optimizer_test.py")
    with open(path, encoding="utf-8") as f:
        text, extra = repoint(f.read(), args.against)
    folder = tempfile.mkdtemp(prefix="keras_lso_tests_")
    try:
        for name, content in extra.items():
            with open(os.path.join(folder, name), "w", encoding="utf-8") as out:
                out.write(content)
        test = os.path.join(folder, "test_keras_lso_%s.py" % args.against)
        with open(test, "w", encoding="utf-8") as out:
            out.write(text)
        command = [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider",
                   "-rfE", "--rootdir", folder]
        if args.keyword:
            command += ["-k", args.keyword]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [folder] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                                check=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    output = result.stdout + result.stderr
    if args.list_failures:
        for line in output.splitlines():
            if line.startswith(("FAILED ", "ERROR ")):
                print(line[:400])
    found = count(output)
    if not any(found.values()):
        print(output[-5000:])
    print("passed %(passed)d failed %(failed)d errors %(errors)d skipped %(skipped)d" % found)
    return 0 if found["failed"] == found["errors"] == 0 and found["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
