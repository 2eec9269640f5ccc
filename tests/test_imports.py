"""The package imports on a bare TensorFlow: optional pieces are imported lazily."""
import subprocess
import sys

import pytest

OPTIONAL = ("horovod", "tensorflow_estimator", "npu_bridge", "matplotlib", "safetensors")


@pytest.mark.slow
def test_importing_the_package_pulls_in_no_optional_dependency():
    # Compared with what `import tensorflow` alone loads (TF 2.21 imports matplotlib itself
    # when it is installed): the package must add none of the optional modules.
    code = ("import sys, tensorflow; before = set(sys.modules); "
            "import npu_loss_scale as nls; "
            "print(','.join(sorted({m.split('.')[0] for m in set(sys.modules) - before} & %r))); "
            "print(nls.get_backend_name())" % (set(OPTIONAL),))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PATH": "", "TF_CPP_MIN_LOG_LEVEL": "3"}).stdout
    added, backend = out.rstrip("\n").split("\n")[-2:]
    assert added == ""
    assert backend == "emulation"
