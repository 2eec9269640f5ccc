"""What differs between the TensorFlow releases the package runs on, one module per concern.

Supported stacks: TensorFlow 1.15 (Python 3.7; Ascend's TF1 adapter ``npu_bridge``), 2.6.5
(Python 3.7-3.9; Ascend's TF2 adapter ``npu_device``), 2.15 and 2.21. The rest of the package
imports the names it needs from here and never tests ``tf.__version__`` itself.

* ``loss_scale_optimizer``: the optimizer's and the managers' base classes (contrib's on 1.15).
* ``lookup``: ``MutableHashTable``.
* ``variables``: resource variables, variable keys, a snapshot of a reference variable.
* ``ops``: ``where`` with 2.x's broadcasting.
* ``op_callbacks``: TensorFlow's op callbacks (1.15's earlier form, with the op's own outputs kept).
* ``collectives``: the cross-process all-reduce (CollectiveReduce on 1.15, V2 on 2.x; V2's
  ``name`` before 2.8).
* ``tracking``: checkpoint children on both Trackable APIs (``_checkpoint_dependencies`` up to
  2.8, ``_trackable_children`` after), and the ``SaveableObject`` classes a checkpoint restores
  a variable through.
* ``tape``: the gradient tape's recording functions.
* ``py_func``: ``tf.numpy_function`` with ``stateful=``.
* ``keras``: which Keras, and its loss-scale classes.
* ``kernel_build``: the compiler flags of the native kernels.
* ``typing``: ``TypedDict`` on Python 3.7.
"""
