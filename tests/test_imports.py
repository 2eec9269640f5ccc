"""The package imports on a bare TensorFlow: optional pieces are imported lazily."""
import subprocess
import sys

OPTIONAL = ("horovod", "tensorflow_estimator", "npu_bridge", "matplotlib", "safetensors")


def test_importing_the_package_pulls_in_no_optional_dependency():
    code = ("import sys, npu_loss_scale as nls; "
            "print(','.join(m for m in %r if m in sys.modules)); "
            "print(nls.get_backend_name())" % (OPTIONAL,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PATH": "", "TF_CPP_MIN_LOG_LEVEL": "3"}).stdout
    loaded, backend = out.rstrip("\n").split("\n")[-2:]
    assert loaded == ""
    assert backend == "emulation"
