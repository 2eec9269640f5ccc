"""Whether overflow localisation is on, and in which mode, for the graphs built from now on: the
switch of :mod:`npu_loss_scale.device.localisation` (which re-exports every name here).

``off``: graphs get nothing extra; ``overflow``: each saturation site notes its magnitude when it
overflows; ``observe``: every site notes its magnitude on every step (the advisor's mode). The
start value is ``$NPU_LOSS_SCALE_LOCALISE``, read at import.
"""
import contextlib
import os
import threading

ENV_VAR = "NPU_LOSS_SCALE_LOCALISE"
OFF, OVERFLOW, OBSERVE = "off", "overflow", "observe"
_MODES = (OFF, OVERFLOW, OBSERVE)

_lock = threading.Lock()


def _initial_mode():
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if raw in ("", "0", "off", "false"):
        return OFF
    if raw in ("1", "on", "true", OVERFLOW):
        return OVERFLOW
    if raw == OBSERVE:
        return OBSERVE
    raise ValueError("environment variable %s must be 0/off, 1/on/overflow or observe; got %r"
                     % (ENV_VAR, os.environ.get(ENV_VAR)))


_state = {"mode": _initial_mode()}


def set_mode(mode):
    """Sets the mode for graphs built from now on: ``"off"``, ``"overflow"`` (note overflowed
    sites) or ``"observe"`` (note every site's magnitude on every step). Returns the previous."""
    if mode not in _MODES:
        raise ValueError("mode must be one of %s; got %r" % (", ".join(_MODES), mode))
    with _lock:
        previous, _state["mode"] = _state["mode"], mode
    return previous


def get_mode():
    """The current mode: "off", "overflow" or "observe"."""
    return _state["mode"]


def enable():
    """Localises overflows in graphs built from now on. Returns the previous mode."""
    return set_mode(OVERFLOW)


def disable():
    """Graphs built from now on get nothing extra. Returns the previous mode."""
    return set_mode(OFF)


def enabled():
    """True when graphs being built now get localisation (mode overflow or observe)."""
    return _state["mode"] != OFF


@contextlib.contextmanager
def localising(mode=OVERFLOW):
    """Context manager: localisation (``mode``) for the graphs built inside it."""
    previous = set_mode(mode)
    try:
        yield
    finally:
        set_mode(previous)


__all__ = ["ENV_VAR", "OFF", "OVERFLOW", "OBSERVE", "set_mode", "get_mode", "enable", "disable",
           "enabled", "localising"]
