"""Known answer: a float16 model with nothing to overflow at its loss scale: no finding."""
import numpy as np
import tensorflow.compat.v1 as tf

import session_loop
from wasted_start import build

if __name__ == "__main__":
    session_loop.train(build, session_loop.arguments(init_loss_scale=2.0 ** 10),
                       np.ones([1, 2], np.float32))
