"""Native kernels, built on first use with the machine's C++ compiler and TensorFlow's headers.

``NlsUnscaleAndCheck(scaled, factors) -> (unscaled, check)`` makes one pass over a scaled
gradient: it writes ``scaled * factors[0] * factors[1]`` (into the gradient's own buffer when
TensorFlow lets it) and returns ``check``, 0.0 when every scaled value is finite and NaN
otherwise. ``factors`` are the two float32 factors of ``1 / loss scale`` of
:class:`npu_loss_scale.scaling.unscale.Reciprocal` (the first is 1 up to a scale of ``2**126``; then
the kernel multiplies once). The product is bitwise what TensorFlow's ``Mul`` gives
(float16/bfloat16 are multiplied in float32 and rounded back, as
:func:`npu_loss_scale.scaling.unscale.unscale_gradient` does). It replaces the
unscaling multiply plus the per-tensor sum of the ``inf_nan`` and ``emulation`` backends:
one pass over the gradients instead of two.

The same library holds the saturation kernels of the emulated device (``saturate.cc``):
``NlsSaturate(x) -> (y, flags)``, saturation-mode arithmetic in one pass (an inf becomes the
dtype's largest finite value of its sign, a NaN +0; ``flags``: an inf seen, a NaN seen), and
``NlsRoundHalfSaturate(x) -> (y, flags)``, the precision emulation's rounding of a float32
value to float16 with that saturation, handed back as float32 (a ``Cast``, the saturation and a
``Cast`` back in one pass, with the CPU's F16C conversions where it has them), and
``NlsRoundHalf(x) -> (y, flags)``, the same rounding in INF/NaN mode (no saturation). They give
the bits the TensorFlow ops they replace give (:mod:`npu_loss_scale.device.saturate` falls back
to those ops when the library is not loaded). ``NlsMagnitude(x, when) -> m`` is the largest
|x| overflow localisation notes for a site (:mod:`npu_loss_scale.device.localisation`), read
only when ``when`` holds (the site overflowed), else 0.

Building needs a C++ compiler (``$CXX``, else ``g++``, else ``c++``; C++17, or C++14 for the
TensorFlow releases before 2.10, see :mod:`npu_loss_scale._internal.compat.kernel_build`) and takes
about 20 seconds, once per TensorFlow version and machine: the library is cached under
``$NPU_LOSS_SCALE_CACHE`` (default ``~/.cache/npu_loss_scale``), keyed by the source, the
TensorFlow version and its compile flags. ``NPU_LOSS_SCALE_FUSED_UNSCALE`` chooses, for all of the library's kernels:

``auto`` (default)
    use the kernels when they build; otherwise warn once (:class:`FusedKernelWarning`, with the
    reason) and keep the TensorFlow ops (two passes for the unscaling, several per saturation),
    which give the same decisions and values. A failed
    compilation is remembered in the cache (a ``.failed`` file beside the library it would have
    been), so later processes give the same reason at once instead of compiling again.
``on``
    the kernel is required: a failed build raises :class:`FusedKernelError`.
``off``
    never build or use it.

A training graph that contains the op can be imported from a MetaGraph only where the library
is loaded (:func:`load_unscale_check` loads it).

The build is announced on the ``npu_loss_scale`` logger (INFO) when it starts and ends;
``npu-loss-scale build-kernel`` builds it ahead of time and ``npu-loss-scale report`` says
whether it is built, where, and why not. Builds take a cross-process lock (several ranks start together), which
needs POSIX's ``fcntl``: where there is none (Windows) the kernel is not built, and mode
``auto`` keeps the two-pass path with a :class:`FusedKernelWarning` that says so.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings

try:
    import fcntl
except ImportError:  # not a POSIX system: no build lock, no build
    fcntl = None

from npu_loss_scale._internal.compat import kernel_build
from npu_loss_scale._internal.messages import FusedKernelWarning, logger

#: The dtypes the op takes (its attribute ``T``), by name.
FUSED_DTYPES = ("float16", "bfloat16", "float32", "float64")

ENV_MODE = "NPU_LOSS_SCALE_FUSED_UNSCALE"
ENV_CACHE = "NPU_LOSS_SCALE_CACHE"
MODES = ("auto", "on", "off")
_HERE = os.path.dirname(os.path.abspath(__file__))
# one library, built from both sources: the unscale-and-check op and the saturation ops
_SOURCES = tuple(os.path.join(_HERE, name) for name in ("unscale_check.cc", "saturate.cc"))
_HEADER = os.path.join(_HERE, "tf_compat.h")   # what both include
_lock = threading.Lock()
_state = {}


class FusedKernelError(RuntimeError):
    """The fused kernel was required (``NPU_LOSS_SCALE_FUSED_UNSCALE=on``) and is unavailable."""


def mode():
    value = os.environ.get(ENV_MODE, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError("%s must be one of %s; got %r"
                         % (ENV_MODE, ", ".join(MODES), os.environ.get(ENV_MODE)))
    return value


def _compiler():
    for candidate in (os.environ.get("CXX"), "g++", "c++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def _cache_dir():
    root = os.environ.get(ENV_CACHE) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "npu_loss_scale")
    return os.path.join(root, "kernels")


def _plan(tf):
    """``(compiler, flags, library path)`` of the kernel for the imported TensorFlow ``tf``.

    The library's name is keyed by the source, the TensorFlow version, the platform, the
    compiler and the flags, so a change of any of them builds again. Raises OSError when no
    compiler is found."""
    cxx = _compiler()
    if cxx is None:
        raise OSError("no C++ compiler found ($CXX, g++, c++)")
    flags = kernel_build.compile_flags(tf) + kernel_build.link_flags(tf)
    sources = []
    for path in _SOURCES + (_HEADER,):
        with open(path, "rb") as handle:
            sources.append(handle.read())
    key = hashlib.sha256(b"\0".join(
        sources + [tf.__version__.encode(), sys.platform.encode(), cxx.encode()]
        + [f.encode() for f in flags])).hexdigest()[:20]
    return cxx, flags, os.path.join(_cache_dir(), "unscale_check-%s.so" % key)


def _failure_file(target):
    return os.path.splitext(target)[0] + ".failed"


def _build(tf):
    """Path of the built library (building it if the cache has none), or raises OSError."""
    cxx, flags, target = _plan(tf)
    failed = _failure_file(target)
    if os.path.exists(target):
        return target
    _raise_remembered(failed)
    if fcntl is None:
        raise OSError("the kernel is built only on POSIX systems: Python has no fcntl module "
                      "here for the build lock")
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    # one build at a time across processes (several ranks start together)
    with open(os.path.join(folder, ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(target):
            return target
        _raise_remembered(failed)
        partial = "%s.%d.tmp" % (target, os.getpid())
        cmd = [cxx, "-O3", "-shared", "-fPIC"] + list(_SOURCES) + ["-o", partial] + flags
        logger.info("building the fused unscale-and-check kernel for TensorFlow %s with %s "
                    "(once per TensorFlow version and machine, about 20 s); cache: %s",
                    tf.__version__, cxx, folder)
        started = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        except subprocess.TimeoutExpired:
            _remember_failure(failed, "the compiler did not finish in 300 s")
        if proc.returncode != 0:
            if os.path.exists(partial):
                os.remove(partial)
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            # the first errors say why; the last lines are often only notes
            tail = [line for line in lines if "error" in line][:3] or lines[-3:]
            _remember_failure(failed, "compiler exit %d: %s" % (proc.returncode, " | ".join(tail)))
        os.replace(partial, target)
        logger.info("built the fused kernel in %.1f s: %s", time.monotonic() - started, target)
    return target


def _remember_failure(path, reason):
    """Writes why this build failed next to where the library would be, and raises OSError.

    The next process with the same source, TensorFlow and flags reads the reason there instead
    of spending the compiler's time again (about 20 s each, which adds up over ranks and CI
    jobs); deleting the file, or changing any of those, builds again."""
    with open(path, "w") as handle:
        handle.write(reason)
    raise OSError(reason)


def _raise_remembered(path):
    """Raises the OSError of an earlier failed build of this library, if there was one."""
    if os.path.exists(path):
        with open(path) as handle:
            reason = handle.read().strip()
        raise OSError("%s (an earlier build failed; remembered in %s: delete it to build again)"
                      % (reason, path))


def load_unscale_check():
    """The loaded op module (``.nls_unscale_and_check``), or None when the mode is ``off`` or
    (mode ``auto``) the build failed. Mode ``on`` raises :class:`FusedKernelError` instead."""
    wanted = mode()
    if wanted == "off":
        return None
    with _lock:
        if "module" not in _state:
            import tensorflow as tf  # pylint: disable=import-outside-toplevel
            try:
                _state["module"] = tf.load_op_library(_build(tf))
                _state["error"] = None
            except (OSError, tf.errors.NotFoundError) as err:
                _state["module"], _state["error"] = None, str(err)
        module, error = _state["module"], _state["error"]
        if module is None:
            if wanted == "on":
                raise FusedKernelError(
                    "%s=on, but the fused unscale-and-check kernel is unavailable: %s"
                    % (ENV_MODE, error))
            if not _state.get("warned"):
                _state["warned"] = True
                warnings.warn("npu_loss_scale: the fused unscale-and-check kernel did not build "
                              "(%s); gradients are checked and unscaled in two passes, and the "
                              "emulated device saturates with TensorFlow ops (same results, "
                              "slower). Set %s=off to silence this."
                              % (error, ENV_MODE), FusedKernelWarning, stacklevel=3)
    return module


def build_unscale_check(rebuild=False):
    """Builds the kernel now (if the cache has none) and loads it; returns the library's path.

    What ``npu-loss-scale build-kernel`` does, so that no training run pauses for the build.
    ``rebuild=True`` deletes the cached library and any remembered failure first. Raises
    OSError (or TensorFlow's NotFoundError from loading) when it cannot be built."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if rebuild:
        target = _plan(tf)[2]
        for path in (target, _failure_file(target)):
            if os.path.exists(path):
                os.remove(path)
    path = _build(tf)
    tf.load_op_library(path)
    return path


def status():
    """What ``npu-loss-scale report`` says about the kernel, without building it: a dict with
    ``mode`` (the environment's choice, or ``invalid``), ``cache`` (the folder),
    ``library`` (where this TensorFlow's build is or would be; None without a compiler),
    ``state`` (``built``, ``not built yet``, ``failed``, ``off``, ``unavailable``) and
    ``reason`` (why not, when it is not built)."""
    try:
        wanted = mode()
    except ValueError as err:
        return {"mode": "invalid", "cache": _cache_dir(), "library": None,
                "state": "unavailable", "reason": str(err)}
    out = {"mode": wanted, "cache": _cache_dir(), "library": None, "state": None,
           "reason": None}
    if wanted == "off":
        out.update(state="off", reason="%s=off" % ENV_MODE)
        return out
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    try:
        out["library"] = _plan(tf)[2]
    except OSError as err:
        out.update(state="unavailable", reason=str(err))
        return out
    if os.path.exists(out["library"]):
        out["state"] = "built"
    elif os.path.exists(_failure_file(out["library"])):
        with open(_failure_file(out["library"])) as handle:
            out.update(state="failed", reason="%s (remembered in %s)"
                       % (handle.read().strip(), _failure_file(out["library"])))
    elif fcntl is None:
        out.update(state="unavailable", reason="no fcntl module (not a POSIX system)")
    else:
        out.update(state="not built yet", reason="built on first use (about 20 s) or by "
                   "`npu-loss-scale build-kernel`")
    return out


def unavailable_reason():
    """Why the last :func:`load_unscale_check` gave None (None when it loaded or never ran)."""
    return _state.get("error")


def _reset_for_tests():
    _state.clear()
