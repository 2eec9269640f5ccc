"""The environment report of ``npu-loss-scale report``: what to paste into a bug report.

Each field is gathered on its own, and a piece that is missing or broken becomes that field's
value (``absent``, ``error: ...``) instead of stopping the report: it is meant to be run
precisely when something does not work. Fields, in order:

``npu-loss-scale``  version and where the package was imported from
``python``          version and executable
``platform``        operating system and machine
``tensorflow``      version (or why it does not import)
``keras``           the Keras ``tf.keras`` is (version and package), and ``TF_USE_LEGACY_KERAS``
``backend``         the detection backend in effect and why (``NPU_LOSS_SCALE_BACKEND`` or the
                    automatic choice)
``sat mode``        the emulated device's overflow mode and where it comes from
``fused kernel``    built (and where), not built yet, failed (why), or off
                    (see :func:`npu_loss_scale._internal.kernels.status`)
``horovod``         version, and whether ``horovod.tensorflow`` imports
``npu_bridge``      a real one (where), or the package's CPU stand-in that ``npu-emulate`` uses
``tensorflow_estimator``  version, or absent
``environment``     the ``NPU_LOSS_SCALE_*`` variables that are set

Example::

    from npu_loss_scale import env_report
    print(env_report.format_report(env_report.collect()))
"""
import importlib
import importlib.util
import os
import platform
import sys

ENV_PREFIX = "NPU_LOSS_SCALE_"


def _distribution_version(name):
    """The installed distribution's version, or None."""
    try:
        from importlib import metadata  # pylint: disable=import-outside-toplevel
    except ImportError:  # Python 3.7
        try:
            import importlib_metadata as metadata  # pylint: disable=import-outside-toplevel
        except ImportError:
            return None
    try:
        return metadata.version(name)
    except Exception:  # pylint: disable=broad-except  # PackageNotFoundError and its kin
        return None


def _package():
    import npu_loss_scale  # pylint: disable=import-outside-toplevel
    return "%s (%s)" % (npu_loss_scale.__version__,
                        os.path.dirname(os.path.abspath(npu_loss_scale.__file__)))


def _python():
    return "%s (%s)" % (platform.python_version(), sys.executable)


def _platform():
    return "%s, %s" % (platform.platform(), platform.machine())


def _tensorflow():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.version.VERSION


def _keras():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    keras = tf.keras
    name = getattr(keras, "__name__", "?").split(".")[0]
    version = getattr(keras, "__version__", None)
    if version is None:  # a lazy loader: ask the package it stands for
        version = getattr(importlib.import_module(name), "__version__", "?")
    legacy = os.environ.get("TF_USE_LEGACY_KERAS")
    return "%s (package %s)%s" % (version, name,
                                  "; TF_USE_LEGACY_KERAS=%s" % legacy if legacy else "")


def _backend():
    from npu_loss_scale.detection import (  # pylint: disable=import-outside-toplevel
        backends as detection)
    name = detection.get_backend_name()
    if os.environ.get(detection.ENV_VAR, "").strip():
        return "%s (from %s)" % (name, detection.ENV_VAR)
    return "%s (automatic: %s)" % (name, "a real npu_bridge imports" if name == "npu"
                                   else "no real npu_bridge")


def _sat_mode():
    from npu_loss_scale.detection import backends as detection
    from npu_loss_scale.device import (  # pylint: disable=import-outside-toplevel
        register as emulation)
    try:
        on_device = detection.get_backend_name() == "npu"
    except ValueError:  # a bad backend variable: the backend field says so
        on_device = False
    if on_device:  # the device's own setting
        inf_nan = emulation.is_inf_nan_enabled()
    else:
        inf_nan = emulation._emulated_mode() == emulation.INF_NAN  # pylint: disable=protected-access
    mode = "inf_nan" if inf_nan else "saturation"
    raw = os.environ.get(emulation.MODE_ENV_VAR)
    return "%s (%s)" % (mode, "from %s=%s" % (emulation.MODE_ENV_VAR, raw) if raw
                        else "the default")


def _fused_kernel():
    from npu_loss_scale._internal import (  # pylint: disable=import-outside-toplevel
        kernels as _kernels)
    status = _kernels.status()
    text = "%s (mode %s)" % (status["state"], status["mode"])
    if status["state"] == "built":
        return "%s: %s" % (text, status["library"])
    details = [status["reason"]] if status["reason"] else []
    details.append("cache %s" % status["cache"])
    return "%s: %s" % (text, "; ".join(details))


def _horovod():
    if importlib.util.find_spec("horovod") is None:
        return "absent"
    version = _distribution_version("horovod") or "version unknown"
    try:
        importlib.import_module("horovod.tensorflow")
    except Exception as err:  # pylint: disable=broad-except  # a build without TF raises anything
        return "%s; horovod.tensorflow does not import: %s" % (version, _one_line(err))
    return "%s; horovod.tensorflow imports" % version


def _npu_bridge():
    from npu_loss_scale.cli import emulate  # pylint: disable=import-outside-toplevel
    origin = emulate.real_npu_bridge_origin()
    if origin is not None:
        return "real, at %s" % origin
    return ("absent; npu-emulate provides the package's CPU stand-in (%s)" % emulate.SHIM_DIR)


def _estimator():
    if importlib.util.find_spec("tensorflow_estimator") is None:
        return "absent"
    return _distribution_version("tensorflow-estimator") or "present, version unknown"


def _environment():
    names = sorted(n for n in os.environ if n.startswith(ENV_PREFIX))
    return ", ".join("%s=%s" % (n, os.environ[n]) for n in names) or "none set"


FIELDS = (
    ("npu-loss-scale", _package),
    ("python", _python),
    ("platform", _platform),
    ("tensorflow", _tensorflow),
    ("keras", _keras),
    ("backend", _backend),
    ("sat mode", _sat_mode),
    ("fused kernel", _fused_kernel),
    ("horovod", _horovod),
    ("npu_bridge", _npu_bridge),
    ("tensorflow_estimator", _estimator),
    ("environment", _environment),
)


def _one_line(err):
    text = " ".join(str(err).split())
    return "%s: %s" % (type(err).__name__, text) if text else type(err).__name__


def collect():
    """``[(field, value)]`` for every field of :data:`FIELDS`; a field that fails to be
    gathered has the value ``"error: <exception>"`` (``"absent"`` for a module not found)."""
    out = []
    for name, gather in FIELDS:
        try:
            value = gather()
        except ModuleNotFoundError as err:
            value = "absent (%s)" % _one_line(err)
        except Exception as err:  # pylint: disable=broad-except  # the report must not crash
            value = "error: %s" % _one_line(err)
        out.append((name, value))
    return out


def format_report(fields):
    """The report as aligned ``field: value`` lines."""
    width = max(len(name) for name, _ in fields)
    return "\n".join("%s : %s" % (name.ljust(width), value) for name, value in fields)


__all__ = [
    "ENV_PREFIX", "FIELDS", "collect", "format_report",
]
