"""Robustness: the script fails after its second step."""
import numpy as np

import session_loop
from wasted_start import build


class _TwoSteps:  # pylint: disable=too-few-public-methods
    steps = 2
    init_loss_scale = 2.0 ** 10
    decr_ratio = 0.5


if __name__ == "__main__":
    session_loop.train(build, _TwoSteps, np.ones([1, 2], np.float32))
    raise RuntimeError("the data loader lost its files")
