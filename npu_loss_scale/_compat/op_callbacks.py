"""TensorFlow's op callbacks (every op created or run passes through a callback).

TensorFlow 2.x: ``add_op_callback`` / ``remove_op_callback``. TensorFlow 1.15 has the same
mechanism (graph construction included) behind one context manager, ``op_callback``; the two
functions below enter and leave it, so callers pair them as in 2.x (last added, first removed).
"""
import threading

from tensorflow.python.framework import op_callbacks as _tf_op_callbacks

if hasattr(_tf_op_callbacks, "add_op_callback"):
    add_op_callback = _tf_op_callbacks.add_op_callback
    remove_op_callback = _tf_op_callbacks.remove_op_callback
else:
    _local = threading.local()   # 1.15 keeps its callback stack per thread, so does this

    def _entered():
        if not hasattr(_local, "entered"):
            _local.entered = []
        return _local.entered

    def add_op_callback(callback):
        """Installs ``callback`` until :func:`remove_op_callback` (1.15: enters its context)."""
        context = _tf_op_callbacks.op_callback(callback)
        context.__enter__()  # pylint: disable=no-member
        _entered().append((callback, context))

    def remove_op_callback(callback):
        """Removes the callback installed last, which must be ``callback``."""
        entered = _entered()
        if not entered or entered[-1][0] is not callback:
            raise ValueError("op callbacks are removed in the reverse order of their addition "
                             "on TensorFlow 1.15; %r is not the last one added" % (callback,))
        entered.pop()[1].__exit__(None, None, None)
