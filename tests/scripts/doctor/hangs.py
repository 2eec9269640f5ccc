"""Robustness: a script that trains two steps, then waits for ever (the doctor's --timeout
stops it with SIGTERM)."""
import time

import numpy as np
import tensorflow.compat.v1 as tf

import session_loop
from wasted_start import build


def _build_and_wait(features):
    loss, extra = build(features)
    tf.add_to_collection("doctor_hang", extra)
    return loss, extra


class _TwoSteps:  # pylint: disable=too-few-public-methods
    steps = 2
    init_loss_scale = 2.0 ** 10
    decr_ratio = 0.5


if __name__ == "__main__":
    session_loop.train(_build_and_wait, _TwoSteps, np.ones([1, 2], np.float32))
    while True:
        time.sleep(1)
