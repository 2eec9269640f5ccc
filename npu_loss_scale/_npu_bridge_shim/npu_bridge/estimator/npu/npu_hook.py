"""Shim of ``npu_bridge.estimator.npu.npu_hook``: the adapter's session-run hooks on CPU."""
import tensorflow as tf

from npu_loss_scale.ascend import loops
from npu_bridge import _ranks
from npu_bridge._shim import module_getattr as _module_getattr


class NPUBroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts rank ``root_rank``'s global variables once the session is created (a no-op
    with one rank; ``hccl_ops.broadcast`` in a ``--ranks N`` run)."""

    def __init__(self, root_rank=None, index=None):
        self.root_rank = 0 if root_rank is None else root_rank
        self.index = index
        self._op = None

    def begin(self):
        if _ranks.rank_size() <= 1:
            return
        from npu_bridge.hccl import hccl_ops  # pylint: disable=import-outside-toplevel
        variables = tf.compat.v1.global_variables()
        values = hccl_ops.broadcast(list(variables), self.root_rank)
        self._op = tf.group(*[v.assign(x) for v, x in zip(variables, values)])

    def after_create_session(self, session, coord):
        if self._op is not None:
            session.run(self._op)


class NPUCheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """TensorFlow's CheckpointSaverHook (the device variant only differs in where it reads)."""


class NPUOutputTensorHook(tf.compat.v1.train.SessionRunHook):
    """Calls ``output_fn(values)`` with the values of ``tensors`` every N steps (N =
    ``output_every_n_steps``, 0 = only at the end), as the device's hook does on the host."""

    def __init__(self, tensors, dependencies=None, output_fn=None, output_every_n_steps=0):
        if isinstance(output_every_n_steps, bool) or not isinstance(output_every_n_steps, int) \
                or output_every_n_steps < 0:
            raise ValueError("output_every_n_steps must be an int >= 0; got %r"
                             % (output_every_n_steps,))
        self._tensors = tensors
        self._dependencies = dependencies
        self._output_fn = output_fn
        self._every = output_every_n_steps
        self._step = 0
        self._last = None

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._tensors)

    def after_run(self, run_context, run_values):
        self._step += 1
        self._last = run_values.results
        if self._every and self._step % self._every == 0 and self._output_fn is not None:
            self._output_fn(run_values.results)

    def end(self, session):
        if not self._every and self._output_fn is not None and self._last is not None:
            self._output_fn(self._last)


class SetIterationsVarHook(tf.compat.v1.train.SessionRunHook):
    """``iterations_per_loop`` for a training loop the script drives itself (a plain
    ``tf.estimator.Estimator`` or a ``MonitoredTrainingSession`` with the NPU session config).

    On the device the hook loads ``iterations_per_loop - 1`` into the adapter's loop variable
    once the session exists, and each ``Session.run`` of the training graph then executes N
    steps before returning to the host. On CPU: the operations among the fetches of each run of
    the session (the train op) are marked as loops of N (:mod:`npu_loss_scale.ascend.loops`),
    so that run executes N steps (global step advances by N; hooks see one call per loop).
    """

    def __init__(self, iterations_per_loop=None):
        from npu_bridge.estimator.npu.util import check_positive_integer  # pylint: disable=import-outside-toplevel
        check_positive_integer(iterations_per_loop, "iterations_per_loop")
        self._iterations_per_loop = iterations_per_loop

    def begin(self):
        if self._iterations_per_loop > 1:
            loops.install_run_hook()

    def before_run(self, run_context):
        if self._iterations_per_loop > 1:
            for item in tf.nest.flatten(run_context.original_args.fetches):
                if isinstance(item, tf.Operation):
                    loops.mark_loop(item, self._iterations_per_loop)
        return None


__all__ = ["NPUBroadcastGlobalVariablesHook", "NPUCheckpointSaverHook", "NPUOutputTensorHook",
           "SetIterationsVarHook"]
__getattr__ = _module_getattr(__name__, __all__)
