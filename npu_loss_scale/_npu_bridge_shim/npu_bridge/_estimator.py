"""TensorFlow's Estimator for the shim (``tensorflow-estimator``, TF <= 2.15), loaded lazily."""

MISSING = ("NPURunConfig / NPUEstimator run on TensorFlow's Estimator, which this TensorFlow "
           "does not have (it was removed after TF 2.15; install tensorflow-estimator with "
           "TF 2.15): %s")


def estimator_lib():
    """``tf.compat.v1.estimator``; ImportError naming what is needed when it is absent."""
    try:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        lib = tf.compat.v1.estimator
        lib.RunConfig  # pylint: disable=pointless-statement
        return lib
    except (ImportError, AttributeError) as err:
        raise ImportError(MISSING % err)


def available():
    try:
        estimator_lib()
        return True
    except ImportError:
        return False
