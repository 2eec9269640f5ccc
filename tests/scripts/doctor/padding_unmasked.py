"""Known answer: the same float16 log over zero padding as padding_masked.py, unmasked: the
overflow reaches the loss. Harmful in both modes."""
import functools

import session_loop
from padding_masked import LENGTHS, build

if __name__ == "__main__":
    session_loop.train(functools.partial(build, masked=False), session_loop.arguments(),
                       LENGTHS)
