"""Each test starts with the emulated register's overflow cleared (tests/conftest.py), whatever
the tests before it left there: pytest-xdist runs the files in another order than a plain run.

The two tests run in file order: the first leaves an overflow in the eager register, the second
checks that it does not see it.
"""
import numpy as np
import pytest
import tensorflow as tf

from npu_loss_scale.device import register as emulation

pytestmark = pytest.mark.skipif(not tf.executing_eagerly(), reason="TF 2 only: eager execution / "
                                "tf.function (the eager register; TF1 graphs have their own)")


def test_a_test_that_leaves_an_overflow_in_the_register():
    emulation.record(tf.constant(True))
    assert np.any(emulation.npu_get_float_status_v2().numpy())


def test_the_next_test_starts_with_the_overflow_cleared():
    assert not np.any(emulation.npu_get_float_status_v2().numpy())
