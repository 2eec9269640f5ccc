"""TensorFlow's op callbacks (every op created or run passes through a callback).

TensorFlow 2.x: ``add_op_callback`` / ``remove_op_callback``, used by
:func:`npu_loss_scale.device.saturation.saturate_every_op`; the tensors a callback returns are what the
op's Python wrapper hands on, and the op keeps its own outputs.

TensorFlow 1.15 has an earlier form of the mechanism: one ``op_callback`` context manager, and
the returned tensors are written into the op's own output list (``op.outputs[i] = replacement``)
before the wrapper copies that list. The op then claims an output that belongs to another op
(the replacement's), so ``tf.gradients``, which walks forward from the sources through
``op.outputs`` and their consumers, never reaches the replacing ops and returns None for every
gradient through them. Here, on 1.15, each replaced output is written back as the op's own as
soon as the wrapper has copied the list: at the next op callback of the thread, or when the
callback is removed, whichever comes first (gradients built inside the context create ops,
``grad_ys`` among them, before they walk the graph). Callers still receive the replacements.
"""
import threading

from tensorflow.python.framework import op_callbacks as _tf_op_callbacks

NATIVE = hasattr(_tf_op_callbacks, "add_op_callback")

if NATIVE:
    add_op_callback = _tf_op_callbacks.add_op_callback
    remove_op_callback = _tf_op_callbacks.remove_op_callback
else:
    _local = threading.local()

    def _pending():
        """(op, slot, own output) of ops whose output list still holds a replacement."""
        if not hasattr(_local, "pending"):
            _local.pending, _local.contexts = [], []
        return _local.pending

    def _restore():
        pending = _pending()
        while pending:
            op, slot, own = pending.pop()
            op._outputs[slot] = own  # pylint: disable=protected-access

    def _restoring(callback):
        """``callback`` with the 1.15 write-back of the outputs it replaces."""
        def invoked(op_type, inputs, attrs, outputs, op_name=None, graph=None):
            _restore()
            replaced = callback(op_type, inputs, attrs, outputs, op_name=op_name, graph=graph)
            if replaced is not None and graph is not None:
                for slot, (own, new) in enumerate(zip(outputs, replaced)):
                    if new is not own:
                        _pending().append((own.op, slot, own))
            return replaced
        return invoked

    def add_op_callback(callback):
        """Installs ``callback`` for this thread (remove callbacks in the reverse order)."""
        _pending()
        context = _tf_op_callbacks.op_callback(_restoring(callback))
        context.__enter__()  # pylint: disable=no-member
        _local.contexts.append((callback, context))

    def remove_op_callback(callback):
        """Removes ``callback``, the last one added in this thread."""
        _pending()
        if not _local.contexts or _local.contexts[-1][0] is not callback:
            raise ValueError("op callbacks must be removed in the reverse order of adding them "
                             "on TensorFlow 1.15; %r is not the last one added" % (callback,))
        _restore()
        _local.contexts.pop()[1].__exit__(None, None, None)
