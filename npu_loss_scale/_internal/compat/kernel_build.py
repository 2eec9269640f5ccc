"""Compiler flags for the package's native kernels, per TensorFlow release.

``tf.sysconfig.get_compile_flags()`` names the include folder and the ``_GLIBCXX_USE_CXX11_ABI``
setting, but not the C++ standard TensorFlow itself was built with. That standard is part of the
ABI: Abseil picks ``std::string_view`` for ``absl::string_view`` under C++17 and its own class
under C++14, so a kernel compiled with the compiler's default (C++17 for g++ 11 and later)
against a C++14 build of TensorFlow refers to symbols the framework library does not have
(``OpKernelRegistrar::InitInternal(..., std::basic_string_view...)``) and fails to load.
TensorFlow was built as C++11 in 1.15 (the release of Ascend's TF1 adapter) and C++14 up to 2.9
(2.6.5 is the release of Ascend's TF2 adapter), both with Abseil's own ``string_view``, and as
C++17 from 2.10 on. Before 2.10 the kernel is compiled as C++14, which compiles both releases'
headers and shares C++11's ABI (on 1.15.5 the kernel builds, loads and runs). 1.15's flags also
say ``-D_GLIBCXX_USE_CXX11_ABI=0``, the pre-C++11 ``std::string`` it was built with.
"""
import re

CXX17_SINCE = (2, 10)


def _release(version):
    """``(major, minor)`` of a TensorFlow version string such as ``2.6.5`` or ``2.15.0-rc1``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError("cannot read a TensorFlow release from version %r" % (version,))
    return int(match.group(1)), int(match.group(2))


def compile_flags(tf):
    """The flags to compile a kernel for the imported TensorFlow ``tf`` with."""
    flags = list(tf.sysconfig.get_compile_flags())
    if any(f.startswith(("-std=", "--std=")) for f in flags):
        return flags
    if _release(tf.version.VERSION) < CXX17_SINCE:
        flags.append("-std=c++14")
    return flags


def link_flags(tf):
    """The flags to link a kernel against the imported TensorFlow ``tf``."""
    return list(tf.sysconfig.get_link_flags())
