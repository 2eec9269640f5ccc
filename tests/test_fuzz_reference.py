"""The fuzz campaign's NumPy reference computes the scaled gradients as TensorFlow's CPU kernels do:
a float32 or bfloat16 product below float32's smallest normal number is flushed to zero.

Seed 11, case 6 (GradScaler, Adam, bfloat16) reached a scale of 2**-123; the gradients whose
scaled value was subnormal came out of the tape as zero, and the reference, which kept them,
differed from the package's update by 0.0019 in Adam's ``m``.
"""
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import fuzz_campaign  # noqa: E402  pylint: disable=wrong-import-position


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("scale", [2.0 ** -123, 2.0 ** -126, 2.0 ** -20, 1.0])
def test_the_scaled_product_is_tensorflows(dtype, scale):
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, [64]).astype(np.float32)
    tf_dtype = tf.as_dtype(dtype)
    s = tf.cast(tf.constant(scale, tf.float32), tf_dtype)
    product = tf.cast(s * tf.cast(tf.constant(a), tf_dtype), tf.float32).numpy()
    model = fuzz_campaign.scaled_product(dtype, fuzz_campaign.round_to(dtype, np.float32(scale)),
                                         a)
    assert product.tobytes() == model.tobytes()


@pytest.mark.slow
def test_a_grad_scaler_case_near_the_smallest_scale_matches_the_reference():
    case = fuzz_campaign.make_case(11, 6, steps=6)
    assert (case["frontend"], case["dtype"], case["optimizer"]) == ("grad_scaler", "bfloat16",
                                                                    "adam")
    case["rule"] = dict(case["rule"], init=2.0 ** -123)   # growth_interval 9: stays put
    case["overflow_rate"] = 0.0
    tally = fuzz_campaign.Tally()
    fuzz_campaign.run_case(case, tally)
    assert tally.reference_checked == 6
    assert tally.mismatches == 0, tally.failures
