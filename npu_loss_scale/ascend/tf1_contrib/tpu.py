"""``tf.contrib.tpu``: the TPU estimator (``tf.compat.v1.estimator.tpu``) and ``tf.compat.v1.tpu``'s
functions, as TF 1.15's contrib.tpu re-exported both."""
import tensorflow as tf

from npu_loss_scale.ascend.tf1_contrib._namespace import _Namespace


_TPU_ESTIMATOR_NAMES = ("RunConfig", "TPUConfig", "TPUEstimator", "TPUEstimatorSpec",
                        "InputPipelineConfig")


class _Tpu(_Namespace):
    """``tf.contrib.tpu``: the TPU estimator (``tf.compat.v1.estimator.tpu``) and ``tf.compat.v1.
    tpu``'s functions, as TF 1.15's contrib.tpu re-exported both."""

    def __getattr__(self, name):
        if name in _TPU_ESTIMATOR_NAMES:
            try:
                return getattr(tf.compat.v1.estimator.tpu, name)
            except (ImportError, AttributeError) as err:
                raise AttributeError(
                    "tf.contrib.tpu.%s is TensorFlow's TPU Estimator, which this TensorFlow does "
                    "not have (it was removed after TF 2.15; install tensorflow-estimator with "
                    "TF 2.15): %s" % (name, err)) from None
        return super().__getattr__(name)


def _tpu():
    out = _Tpu()
    object.__setattr__(out, "_path", "tf.contrib.tpu")
    object.__setattr__(out, "_fallback", lambda: [tf.compat.v1.tpu])
    return out


__all__ = []
