"""A pytest plugin that switches eager execution on before any test is collected, for
``python -m pytest -p tf1_eager_plugin ...`` on TensorFlow 1.15: how a TF 1.15 program runs
TF 2 style code (eager execution is a start-up switch there; it cannot be switched back).
tests/test_grad_scaler_tf1.py runs the GradScaler test files this way. On TensorFlow 2 it
changes nothing (eager execution is already on)."""
import tensorflow as tf

tf.compat.v1.enable_eager_execution()
