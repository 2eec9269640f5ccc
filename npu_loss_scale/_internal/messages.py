"""The package's warning categories and its logger: how it tells users something.

Warnings go through :mod:`warnings`, each with a category of its own, so users can filter,
silence or raise them (``warnings.simplefilter("ignore", nls.LossScaleStuckWarning)``, or
``"error::npu_loss_scale.LossScaleStuckWarning"`` in pytest's ``filterwarnings`` setting). Every
category derives from :class:`NpuLossScaleWarning`, which filters them all at once.

Informational messages (the fused kernel being built, a report file written) go to the logger
``logging.getLogger("npu_loss_scale")`` at INFO, and events that break a run (a rank's
agreement watchdog firing) at ERROR; the command-line tools show INFO and above on stderr, a
library user configures the logger as any other.

Conditions found while a graph runs (the loss scale stuck at its minimum) are warned from the
step itself: :func:`warn_when_run` builds an op that calls :func:`warnings.warn` each time it is
run, in ``tf.function``s, TF1 sessions and eagerly alike.

Importing this module needs no TensorFlow.
"""
import contextlib
import logging
import warnings

LOGGER_NAME = "npu_loss_scale"
logger = logging.getLogger(LOGGER_NAME)


class NpuLossScaleWarning(UserWarning):
    """Base class of every warning npu_loss_scale issues (filter it to filter them all)."""


class OverflowInvisibleWarning(NpuLossScaleWarning):
    """The chosen detection backend cannot see the overflows this graph produces."""


class RanksMayDivergeWarning(NpuLossScaleWarning, RuntimeWarning):
    """Several ranks train, but the optimizer was built with ``is_distributed=False``."""


class FusedKernelWarning(NpuLossScaleWarning):
    """The fused kernel did not build; the two-pass path is used instead."""


class LossScaleStuckWarning(NpuLossScaleWarning, RuntimeWarning):
    """A step overflowed at the smallest loss scale its rule allows; the step was skipped.

    The scale cannot go lower, so every later step that overflows the same way is skipped as
    well: the model (or its loss) overflows whatever the scale. Raised while the step runs,
    once per such step (Python's default filter shows a repeated identical message once).
    """


def warn_when_run(category, template, tensors, name="npu_loss_scale_warning"):
    """An op that warns ``category(template % values)`` each time it runs.

    ``values`` are the Python numbers the ``tensors`` (scalars) hold in that run. The op goes
    where a ``tf.print`` would (a branch of a ``tf.cond``, a control dependency), and works in
    TF1 graphs, ``tf.function``s and eagerly. Returns the op's output (a scalar bool, True).
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_loss_scale._internal.compat import py_func  # pylint: disable=import-outside-toplevel

    def _warn(*values):
        import numpy as np  # pylint: disable=import-outside-toplevel
        # attributed to this line (the caller is TensorFlow's executor), so that
        # filterwarnings(module="npu_loss_scale") matches it
        warnings.warn(category(template % tuple(np.asarray(v).item() for v in values)))
        return np.array(True)

    done = py_func.numpy_function(_warn, list(tensors), tf.bool, stateful=True, name=name)
    return tf.reshape(done, [])


class _StderrHandler(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a message comes (so redirections
    made later, as tests do, are followed)."""

    def __init__(self):  # pylint: disable=super-init-not-called
        logging.Handler.__init__(self)  # StreamHandler's would fix the stream now

    @property
    def stream(self):
        import sys  # pylint: disable=import-outside-toplevel
        return sys.stderr


@contextlib.contextmanager
def logged_to_stderr(level=logging.INFO):
    """Within the block, the package's log messages of ``level`` and above are shown on stderr
    as ``npu_loss_scale: <message>``: what the command-line tools do (a library leaves that to
    its user). They stop at this handler (no second copy through the root logger's handlers,
    which TensorFlow's absl sets up); the logger is as it was after the block."""
    saved = (logger.level, logger.propagate)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(LOGGER_NAME + ": %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


__all__ = ["LOGGER_NAME", "logger", "NpuLossScaleWarning", "OverflowInvisibleWarning",
           "RanksMayDivergeWarning", "FusedKernelWarning", "LossScaleStuckWarning",
           "warn_when_run", "logged_to_stderr"]
