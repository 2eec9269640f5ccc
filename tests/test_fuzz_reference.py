"""The fuzz campaign's NumPy reference computes the scaled gradients as TensorFlow's CPU kernels do:
a float32 or bfloat16 product below float32's smallest normal number is flushed to zero where
the kernels flush (TF 2, eager and graph; TF 1.15's graph executor) and kept where they do not
(TF 1.15's eager kernels).

Seed 11, case 6 (GradScaler, Adam, bfloat16) reached a scale of 2**-123; the gradients whose
scaled value was subnormal came out of the tape as zero, and the reference, which kept them,
differed from the package's update by 0.0019 in Adam's ``m``. On TF 1.15, eager, the same case
keeps those gradients, and the reference that flushed them differed by 0.0024 (26 mismatches in
6 steps) until it measured the kernels' mode.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import fuzz_campaign  # noqa: E402  pylint: disable=wrong-import-position
from fuzz_checks import kernels_flush_subnormals  # noqa: E402  pylint: disable=C0413

from tf_versions import TF1  # noqa: E402  pylint: disable=wrong-import-position

DTYPES = ("float32", "bfloat16", "float16")
SCALES = (2.0 ** -123, 2.0 ** -126, 2.0 ** -20, 1.0)
# TF 1.15's eager check starts a second process (TensorFlow's import alone takes seconds)
SLOW_ON_TF1 = pytest.mark.slow if TF1 else (lambda test: test)


def _coefficients():
    return np.random.default_rng(5).uniform(-1, 1, [64]).astype(np.float32)


def _model(dtype, scale, flush):
    return fuzz_campaign.scaled_product(dtype, fuzz_campaign.round_to(dtype, np.float32(scale)),
                                        _coefficients(), flush)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", SCALES)
def test_the_scaled_product_is_tensorflows_in_a_graph(dtype, scale):
    tf_dtype = tf.as_dtype(dtype)
    with tf.Graph().as_default():   # TF 1.15's graph mode and TF 2 alike: a Session run, fed
        scale_in = tf.compat.v1.placeholder(tf.float32, [])
        a_in = tf.compat.v1.placeholder(tf.float32, [64])
        product = tf.cast(tf.cast(scale_in, tf_dtype) * tf.cast(a_in, tf_dtype), tf.float32)
        with tf.compat.v1.Session() as sess:
            product = sess.run(product, {scale_in: scale, a_in: _coefficients()})
    assert product.tobytes() == _model(dtype, scale, flush=True).tobytes()


def eager_products_against_the_model():
    """Run eagerly: per (dtype, scale), whether TensorFlow's product equals the model's with
    flushing as measured here; and what was measured."""
    a = tf.constant(_coefficients())
    flush = kernels_flush_subnormals()
    same = {}
    for dtype in DTYPES:
        for scale in SCALES:
            s = tf.cast(tf.constant(scale, tf.float32), dtype)
            product = tf.cast(s * tf.cast(a, dtype), tf.float32).numpy()
            same["%s %r" % (dtype, scale)] = \
                product.tobytes() == _model(dtype, scale, flush).tobytes()
    return {"flush": flush, "same": same}


@SLOW_ON_TF1
def test_the_scaled_product_is_tensorflows_eagerly():
    """TF 2: here. TF 1.15: in a process that turns eager execution on at its start."""
    if TF1:
        code = ("import sys, json; import tensorflow as tf; "
                "tf.compat.v1.enable_eager_execution(); sys.path.insert(0, sys.argv[1]); "
                "import test_fuzz_reference as t; print(json.dumps(t.eager_products_against_"
                "the_model()))")
        run = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "tests")],
                             stdout=subprocess.PIPE, check=True)
        result = json.loads(run.stdout.decode().strip().splitlines()[-1])
    else:
        result = eager_products_against_the_model()
    # measured: TF 1.15's eager kernels keep float32 subnormals, TF 2's flush them
    assert result["flush"] is (not TF1)
    assert all(result["same"].values()), result


def test_kernels_flush_in_a_graph():
    with tf.Graph().as_default():
        assert kernels_flush_subnormals() is True


@pytest.mark.slow
def test_a_grad_scaler_case_near_the_smallest_scale_matches_the_reference():
    case = fuzz_campaign.make_case(11, 6, fuzz_campaign.FRONTENDS, steps=6)
    assert (case["frontend"], case["dtype"], case["optimizer"]) == ("grad_scaler", "bfloat16",
                                                                    "adam")
    case["rule"] = dict(case["rule"], init=2.0 ** -123)   # growth_interval 9: stays put
    case["overflow_rate"] = 0.0
    tally = fuzz_campaign.Tally()
    fuzz_campaign.run_cases([case], tally)   # TF 1.15: eager, in a second process
    assert tally.reference_checked == 6
    assert tally.mismatches == 0, tally.failures
