"""The rank variables that Ascend launchers (and ``python -m npu_loss_scale.emulate --ranks N``)
set for each process, read one way: ``RANK_SIZE``, ``RANK_ID`` and their kin.

Unset or blank gives the default; a value that is not an integer is a ValueError naming the
variable and the value. A caller for which a malformed value only means "no sign of several
ranks" (the divergence warning, joining a rank's cluster) catches that error itself, so that the
parsing rule stays here. TensorFlow-free: the launcher and the shim read these before TensorFlow
is imported.
"""
import os


def env_int(name, default):
    """The integer in the environment variable ``name``; ``default`` when it is unset or blank."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError("environment variable %s must be an integer; got %r"
                         % (name, raw)) from None


def rank_size():
    """How many ranks the job has: ``$RANK_SIZE``, else 1."""
    return env_int("RANK_SIZE", 1)


def rank_id():
    """This process's rank: ``$RANK_ID``, else 0."""
    return env_int("RANK_ID", 0)


__all__ = ["env_int", "rank_size", "rank_id"]
