"""What the tests need to know about the TensorFlow they run on (1.15 or 2.x), in one place.

* ``TF1``: TensorFlow 1.15, where the package's optimizer subclasses
  ``tf.contrib.mixed_precision.LossScaleOptimizer``.
* ``tf_mixed_precision``: TensorFlow's own v1 loss-scale optimizer and loss scales
  (``tf.compat.v1.mixed_precision`` in 2.x, ``tf.compat.v1.train.experimental`` in 1.15).
* ``BASE_OPTIMIZER``: the class the package's optimizer subclasses on this TensorFlow.
* ``evaluate(build)``: the NumPy values of the tensors ``build()`` returns, eagerly on 2.x and
  in a fresh graph run by a Session on 1.15, variables initialised (a test written once for both).
* ``restore_shape_error(saved, own, name)``: the text of the ``ValueError`` a restore raises for a
  variable whose saved shape differs, as a regex.
* ``graph_session()``/``initialise_variables()``: nothing eagerly; on 1.15 a fresh graph with a
  Session as the default (for the package's methods that read and write variables), and the
  initialisation of the variables created so far.
* ``control_flow(v2)``: builds under v1 or v2 control flow and restores what was set before
  (2.x defaults to v2, 1.15 to v1). On 1.15, v2 control flow skips the test: it is an opt-in
  preview there (TF1 scripts build v1 ``cond``/``while_loop``), and the package does not support
  it on 1.15 (a v2 ``while_loop`` body cannot reach the emulated register built outside it).
"""
import contextlib
import re

import pytest
import tensorflow as tf

from npu_loss_scale._internal.compat import loss_scale_optimizer as _lso

TF1 = _lso.CONTRIB
tf_mixed_precision = tf.compat.v1.train.experimental if TF1 else tf.compat.v1.mixed_precision
BASE_OPTIMIZER = _lso.LossScaleOptimizerBase.__mro__[1] if TF1 else _lso.LossScaleOptimizerBase


def evaluate(build):
    """The NumPy values of the tensors (any nest) that ``build()`` returns: computed eagerly
    where eager execution is on (TensorFlow 2), else built in a fresh graph and run by a Session
    (TensorFlow 1.15's default) after initialising the variables it created."""
    if tf.executing_eagerly():
        return tf.nest.map_structure(lambda t: t.numpy(), build())
    with tf.Graph().as_default():
        out = build()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return sess.run(out)


@contextlib.contextmanager
def graph_session():
    """Eagerly (TensorFlow 2): nothing. Otherwise (1.15): a fresh graph and a Session as the
    default inside the block, so that methods needing a session (``load_state_dict``,
    ``state_dict``) find it."""
    if tf.executing_eagerly():
        yield
        return
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess, sess.as_default():
        yield


def initialise_variables():
    """Initialises the variables created so far in the default Session's graph (no-op eagerly)."""
    if not tf.executing_eagerly():
        tf.compat.v1.get_default_session().run(tf.compat.v1.global_variables_initializer())


@contextlib.contextmanager
def control_flow(v2):
    """v2 (True) or v1 (False) control flow inside the block; the previous setting after it."""
    if v2 and TF1:
        pytest.skip("v2 control flow on TensorFlow 1.15 is not supported by the package (1.15's "
                    "default and TF1 scripts' control flow is v1)")
    before = tf.compat.v1.control_flow_v2_enabled()
    (tf.compat.v1.enable_control_flow_v2 if v2 else tf.compat.v1.disable_control_flow_v2)()
    try:
        yield
    finally:
        (tf.compat.v1.enable_control_flow_v2 if before
         else tf.compat.v1.disable_control_flow_v2)()


# A test of eager execution, tf.function or TF 2 Keras: TF1 scripts build a graph and run it in
# a Session, and TensorFlow 1.15 runs graphs by default (eager is a start-up switch there).
TF2_ONLY_REASON = ("TF 2 only: eager execution / tf.function (TF 1.15 scripts build graphs and "
                   "run them in a Session)")
tf2_only = pytest.mark.skipif(TF1, reason=TF2_ONLY_REASON)

# What TF1 scripts meet only on TensorFlow 2: the TF1 names mapped onto TF 2 (``emulate --tf1``,
# ``tf.contrib``, Keras paths TF 2 moved) and Ascend's TF 2 adapter ``npu_device``. On 1.15 a script
# gets TensorFlow 1.15's own names and ``npu_bridge``; the tests of that run there.
tf1_names_on_tf2_only = pytest.mark.skipif(
    TF1, reason="TF 2 only: TF1 names mapped onto TF 2 (TF 1.15 scripts get 1.15's own)")
npu_device_only = pytest.mark.skipif(
    TF1, reason="TF 2 only: npu_device is Ascend's TF 2 adapter (TF 1.15 scripts use npu_bridge)")


def _estimator_available():
    try:
        return hasattr(tf.compat.v1.estimator, "RunConfig")
    except (ImportError, AttributeError):
        return False


# The Estimator API (NPURunConfig, NPUEstimator): tensorflow-estimator exists up to 2.15.
estimator_only = pytest.mark.skipif(not _estimator_available(),
                                    reason="TensorFlow's estimator is absent (removed after 2.15)")

# TensorFlow 1.15 has only the first CollectiveReduce: no timeout, group and instance keys as
# attributes rather than inputs (the package uses it there; this marks tests of V2's layout).
collective_v2_only = pytest.mark.skipif(TF1, reason="CollectiveReduceV2's layout (timeout, keys "
                                                    "as inputs): TF 1.15 has CollectiveReduce")

# TensorFlow 1.15's collective ops keep waiting for a dead rank when their step is cancelled
# (operation_timeout_in_ms, measured). The package bounds its own (a watchdog ends the process);
# those tf.distribute builds inside a strategy it cannot reach.
STRATEGY_UNBOUNDED_ON_TF1_REASON = (
    "TF 2 only: on TF 1.15 tf.distribute's own collectives wait for a dead rank past "
    "operation_timeout_in_ms (docs/distributed.md)")
strategy_timeout_tf2_only = pytest.mark.skipif(TF1, reason=STRATEGY_UNBOUNDED_ON_TF1_REASON)

# The supported stacks below 2.15 (1.15, 2.6) word a restore's shape mismatch with the two shapes
# alone; 2.15 and later also name the variable.
_RESTORE_NAMES_VARIABLE = tuple(int(p) for p in tf.__version__.split(".")[:2]) >= (2, 15)


def restore_shape_error(saved, own, name):
    """A regex for the ``ValueError`` a checkpoint restore raises when the saved tensor's shape
    ``saved`` (a tuple) differs from the variable's ``own``; ``name`` is the variable's name,
    e.g. ``"scale:0"``, which the message holds where this TensorFlow says it."""
    if _RESTORE_NAMES_VARIABLE:
        return r"shape %s .*shape %s and name %s" % (re.escape(str(saved)), re.escape(str(own)),
                                                      re.escape(name))
    return r"Shapes %s and %s are incompatible" % (re.escape(str(own)), re.escape(str(saved)))
