"""Progress output of the BERT example: a tqdm bar over applied steps, on stderr and only where a
person watches (a terminal), and log lines on stdout that do not break it."""
import sys
import time

import tensorflow as tf


def say(message):
    """Prints a line without breaking the progress bar."""
    try:
        from tqdm import tqdm
        tqdm.write(message, file=sys.stdout)
    except ImportError:
        print(message)
    sys.stdout.flush()


def progress_bar_wanted(flag, stream=None):
    """Whether to draw the progress bar: as ``--progress_bar`` says if given, else only when
    ``stream`` (default: stderr, where the bar is drawn) is a terminal."""
    if flag is not None:
        return bool(flag)
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class ProgressBarHook(tf.compat.v1.train.SessionRunHook):
    """A tqdm bar over applied steps; skipped steps show in its postfix while the bar waits.

    Also times every training iteration (``durations``, seconds)."""

    def __init__(self, total, loss, loss_scale, finite=None, enabled=True):
        self.total, self.enabled = total, enabled
        self.fetches = {"loss": loss, "loss_scale": loss_scale}
        if finite is not None:
            self.fetches["finite"] = finite
        self.durations = []
        self.skipped = 0
        self.bar = None

    def after_create_session(self, session, coord):  # pylint: disable=unused-argument
        start_step = int(session.run(tf.compat.v1.train.get_global_step()))
        if self.enabled:
            from tqdm import tqdm
            self.bar = tqdm(total=self.total, initial=start_step, unit="step",
                            dynamic_ncols=True, mininterval=2.0, file=sys.stderr)

    def before_run(self, run_context):  # pylint: disable=unused-argument
        self._t0 = time.perf_counter()
        return tf.compat.v1.train.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):  # pylint: disable=unused-argument
        self.durations.append(time.perf_counter() - self._t0)
        r = run_values.results
        applied = bool(r.get("finite", True))
        self.skipped += 0 if applied else 1
        if self.bar is not None:
            self.bar.set_postfix_str("loss %.3f, loss scale %g, skipped %d"
                                     % (r["loss"], r["loss_scale"], self.skipped), refresh=False)
            self.bar.update(1 if applied else 0)

    def end(self, session):  # pylint: disable=unused-argument
        if self.bar is not None:
            self.bar.close()
