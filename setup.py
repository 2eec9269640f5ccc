"""npu-loss-scale: Ascend NPU loss scaling for TensorFlow, testable on CPU."""
import os
import re

from setuptools import find_packages, setup

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "npu_loss_scale", "__init__.py"), encoding="utf-8") as f:
    version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
with open(os.path.join(here, "README.md"), encoding="utf-8") as f:
    long_description = f.read()

setup(
    name="npu-loss-scale",
    version=version,
    description="Ascend NPU loss scaling (NPULossScaleOptimizer, loss-scale managers, float-status "
                "overflow detection) for TensorFlow, with a CPU emulation of the device",
    long_description=long_description,
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["npu_loss_scale", "npu_loss_scale.*"]),
    # The emulate shim is a sys.path folder, not a subpackage: ship its files as package data.
    package_data={"npu_loss_scale": ["_npu_bridge_shim/*/*.py", "_npu_bridge_shim/*/*/*.py",
                                     "_npu_bridge_shim/*/*/*/*.py",
                                     # built on first use (npu_loss_scale/_kernels)
                                     "_kernels/*.cc"]},
    python_requires=">=3.7",
    # TensorFlow itself is not pinned as a dependency: users bring tensorflow, tensorflow-cpu or
    # Huawei's TensorFlow build. Supported: 1.15.5 (Python 3.7), 2.6.5, 2.15.x and 2.21.x.
    # typing.TypedDict is Python 3.8's: on 3.7 it comes from typing_extensions.
    install_requires=["numpy", "typing_extensions; python_version < '3.8'"],
    # The pytest plugin (fixtures npu_device, npu_ranks; see npu_loss_scale/pytest_plugin.py):
    # installing the package is enough for pytest to load it.
    entry_points={"pytest11": ["npu_loss_scale = npu_loss_scale.pytest_plugin"]},
    extras_require={
        "tf215": ["tensorflow-cpu>=2.15,<2.16", "numpy<2"],
        "tf221": ["tensorflow-cpu>=2.21,<2.22"],
        "estimator": ["tensorflow-estimator>=2.15,<2.16"],
        "horovod": ["horovod==0.28.1"],
        "dev": ["pytest", "hypothesis"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: Apache Software License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
