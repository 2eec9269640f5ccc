"""Shim of ``npu_bridge.estimator.npu.npu_hook``: the adapter's session-run hooks on CPU."""
import tensorflow as tf

from npu_bridge import _ranks
from npu_bridge._shim import module_getattr as _module_getattr


class NPUBroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts rank ``root_rank``'s variables after initialisation: a no-op with one rank.

    With RANK_SIZE > 1 it raises NotImplementedError when the session starts (no HCCL on CPU).
    """

    def __init__(self, root_rank=None, index=None):
        self.root_rank = 0 if root_rank is None else root_rank
        self.index = index

    def begin(self):
        _ranks.require_single_rank("NPUBroadcastGlobalVariablesHook")


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


__all__ = ["NPUBroadcastGlobalVariablesHook", "NPUCheckpointSaverHook", "NPUOutputTensorHook"]
__getattr__ = _module_getattr(__name__, __all__)
