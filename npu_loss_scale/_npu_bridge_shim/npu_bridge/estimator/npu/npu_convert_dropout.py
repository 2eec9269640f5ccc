"""Shim of ``npu_bridge.estimator.npu.npu_convert_dropout``.

Imported for its effect: on the device it makes ``tf.nn.dropout`` (and Keras dropout) run as the
device's dropout ops. On CPU ``tf.nn.dropout`` already computes what those ops compute (keep with
probability ``1 - rate``, scale kept values by ``1 / (1 - rate)``), so importing it changes
nothing.
"""
