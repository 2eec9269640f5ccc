"""Robustness: two steps of a Session loop, then, in the emulation's saturation mode only
(``NPU_LOSS_SCALE_SAT_MODE``, which ``npu-emulate --sat-mode`` sets), a wait for ever: the
doctor's ``--timeout`` stops that run, and its INF/NaN run ends by itself."""
import os
import time

import numpy as np

import session_loop
from wasted_start import build


class _TwoSteps:  # pylint: disable=too-few-public-methods
    steps = 2
    init_loss_scale = 2.0 ** 10
    decr_ratio = 0.5


if __name__ == "__main__":
    session_loop.train(build, _TwoSteps, np.ones([1, 2], np.float32))
    print("NPU_LOSS_SCALE_SAT_MODE=%s" % os.environ.get("NPU_LOSS_SCALE_SAT_MODE"), flush=True)
    while os.environ.get("NPU_LOSS_SCALE_SAT_MODE") in ("saturation", "0"):
        time.sleep(1)
