"""What running an Ascend TF1 script takes on each TensorFlow release.

On TensorFlow 1.x a script's ``import tensorflow as tf`` already is TF1: graph mode,
``tensorflow.contrib``, TF 1.15's Keras and every module path the script names. There the entry
point's TF1 mode (``--tf1``) and the TF 2 paths it installs otherwise (moved Keras modules, TF
2.4 names given back) have nothing to do. On TensorFlow 2.x TF1 scripts need that mode.

Names:

* ``NATIVE_TF1``: True on TensorFlow 1.x.
"""
import tensorflow as tf

NATIVE_TF1 = tf.__version__.split(".", 1)[0] == "1"
