"""Runs TensorFlow 1.15's own tests of ``tf.contrib.mixed_precision`` against this package.

    python scripts/run_contrib_tests.py PATH/loss_scale_optimizer_test.py \
        PATH/loss_scale_manager_test.py [-- PYTEST_ARGS...]

The test files are TensorFlow's (``tensorflow/contrib/mixed_precision/python/`` at the r1.15
branch; the 1.15 wheel does not ship them): bring them yourself, this project does not keep
them. Each file is read, its imports of ``tensorflow.contrib.mixed_precision.python``'s
``loss_scale_manager`` and ``loss_scale_optimizer`` are re-pointed at modules holding this
package's classes (``LossScaleManager``, ``FixedLossScaleManager``,
``ExponentialUpdateLossScaleManager``; ``LossScaleOptimizer`` = ``NPULossScaleOptimizer``),
and the rewritten copy runs under pytest in a temporary folder. The last line gives the counts.
Where the results differ from contrib on purpose (Ascend's rules), docs/ascend-surface.md says
which and why.
"""
import os
import re
import shutil
import sys
import tempfile
import types

CONTRIB = "tensorflow.contrib.mixed_precision.python"
_IMPORT = re.compile(r"^from %s import (\w+)(?: as (\w+))?$" % re.escape(CONTRIB), re.M)
_ALIAS_MODULE = "_nls_contrib_%s"


def alias_modules():
    """Modules named like contrib's two, holding this package's classes."""
    import npu_loss_scale as nls  # pylint: disable=import-outside-toplevel
    managers = types.ModuleType(_ALIAS_MODULE % "loss_scale_manager")
    managers.LossScaleManager = nls.LossScaleManager
    managers.FixedLossScaleManager = nls.FixedLossScaleManager
    managers.ExponentialUpdateLossScaleManager = nls.ExponentialUpdateLossScaleManager
    optimizers = types.ModuleType(_ALIAS_MODULE % "loss_scale_optimizer")
    optimizers.LossScaleOptimizer = nls.NPULossScaleOptimizer
    return {"loss_scale_manager": managers, "loss_scale_optimizer": optimizers}


def rewrite(source, path):
    """``source`` with contrib's imports replaced by the alias modules; ValueError if the file
    imports none of them (a wrong file would otherwise test contrib itself)."""
    known = alias_modules()

    def replace(match):
        module, alias = match.group(1), match.group(2) or match.group(1)
        if module not in known:
            raise ValueError("%s imports %s.%s, which has no counterpart here (known: %s)"
                             % (path, CONTRIB, module, ", ".join(sorted(known))))
        return "import %s as %s" % (_ALIAS_MODULE % module, alias)

    rewritten, count = _IMPORT.subn(replace, source)
    if count == 0:
        raise ValueError("%s does not import from %s: not one of contrib's mixed-precision tests"
                         % (path, CONTRIB))
    return rewritten


def main(argv):
    paths, pytest_args = argv, []
    if "--" in argv:
        cut = argv.index("--")
        paths, pytest_args = argv[:cut], argv[cut + 1:]
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    folder = tempfile.mkdtemp(prefix="nls_contrib_tests_")
    try:
        copies = []
        for path in paths:
            with open(path, encoding="utf-8") as f:
                source = rewrite(f.read(), path)
            copy = os.path.join(folder, os.path.basename(path))
            with open(copy, "w", encoding="utf-8") as f:
                f.write(source)
            copies.append(copy)
        for module in alias_modules().values():
            sys.modules[module.__name__] = module
        import pytest  # pylint: disable=import-outside-toplevel
        return pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", folder, "-rfE"]
                           + pytest_args + copies)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main(sys.argv[1:]))
