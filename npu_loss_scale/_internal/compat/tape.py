"""The gradient tape's recording functions, which moved between TensorFlow releases.

``record_operation`` (puts an op with its own backward function on every active tape, so a
``GradientTape`` inside a ``tf.function`` follows the package's gradient instead of the op
type's registered one) and ``stop_recording`` live in ``tensorflow.python.eager.record`` from
TF 2.13 on, and in ``tensorflow.python.eager.tape`` before (TF 2.6.5).
"""


def _module():
    try:
        from tensorflow.python.eager import record  # pylint: disable=import-outside-toplevel
    except ImportError:
        from tensorflow.python.eager import (  # pylint: disable=import-outside-toplevel
            tape as record)
    return record


def record_operation(op_type, outputs, inputs, backward_function):
    """Records an op computing ``outputs`` from ``inputs`` on every active gradient tape."""
    _module().record_operation(op_type, outputs, inputs, backward_function)


def stop_recording():
    """Context manager: ops run inside it are recorded on no tape."""
    return _module().stop_recording()
