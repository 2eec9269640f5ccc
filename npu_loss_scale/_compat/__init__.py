"""What differs between the TensorFlow releases the package runs on, one module per concern.

Supported stacks: TensorFlow 1.15 (Python 3.7; Ascend's TF1 adapter ``npu_bridge``), 2.6.5
(Python 3.7-3.9; Ascend's TF2 adapter ``npu_device``), 2.15 and 2.21. The rest of the package
imports the names it needs from here and never tests ``tf.__version__`` itself.
"""
