"""This checkout, for the scripts that start worker processes: ``REPO`` and an environment with
it first on ``PYTHONPATH``. A script run as ``python scripts/x.py`` has ``scripts/`` on its path,
not the checkout, so its workers would import whatever ``npu_loss_scale`` the interpreter has
installed (an editable install of another checkout included) and measure that instead."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def environment(base=None):
    """A copy of ``base`` (``os.environ`` by default) with this checkout first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [env.get("PYTHONPATH")] if p])
    return env
