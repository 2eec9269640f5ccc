"""npu_bridge's Keras distribution names at N emulated ranks: the collectives they use.

``npu_distributed_optimizer_wrapper``/``KerasDistributeOptimizer`` (a Keras optimizer whose
gradients are averaged over the ranks) and ``NPUBroadcastGlobalVariablesCallback`` run where
the Keras code runs, through the two collective paths the shim already has:

* a TF1 graph (Keras 2 in the session of ``set_keras_session_npu_config``, ``--tf1`` or
  ``npu_device.compat.enable_v1()``): ``hccl_ops`` (``npu_optimizer.allreduce``, kept in
  :mod:`npu_bridge._allreduce`, for gradients,
  IndexedSlices gathered, as on the device; ``hccl_ops.broadcast`` for variables), built into
  the graph and run by the Keras session on the rank's server;
* TF2 code (eager ``model.fit``, ``tf.function``; Keras 2 on TF 2.15, Keras 3 on TF 2.16+): the
  collectives behind ``npu_device.distribute`` (:mod:`npu_device.distribute._collectives`),
  which need the rank to run in TF2 mode (no ``--tf1``).
"""
from npu_bridge import _ranks
from npu_bridge._shim import NotEmulatedError


def cluster(what):
    """The emulated cluster when this process is one of several ranks, else None (one rank).

    With RANK_SIZE > 1 outside a ``--ranks`` run, NotImplementedError naming ``--ranks``.
    """
    if _ranks.rank_size() <= 1:
        return None
    from npu_loss_scale.ascend import ranks  # pylint: disable=import-outside-toplevel
    group = ranks.cluster()
    if group is None:
        _ranks.require_single_rank(what)
    return group


def _graph_mode():
    from npu_loss_scale._internal.compat.ops import (  # pylint: disable=import-outside-toplevel
        executing_eagerly_outside_functions)
    return not executing_eagerly_outside_functions()


def _require_eager_collectives(what):
    from npu_loss_scale.ascend import ranks  # pylint: disable=import-outside-toplevel
    if not ranks.eager_joined():
        raise NotEmulatedError(
            "%s in TF2 (eager or tf.function) code at several ranks is not emulated in a rank "
            "started with --tf1: the emulated TF2 collectives need TF2 mode. Leave out --tf1, or "
            "run the Keras code in a TF1 graph and session (tf.compat.v1.disable_v2_behavior(), "
            "set_keras_session_npu_config)" % what, name="npu_bridge")


def all_reduce_mean(what):
    """``fn(grads, reduction)`` for :func:`npu_device.distribute._keras.all_reduce_gradients`:
    the gradients (a list; None stays None) averaged over the ranks where the call runs."""

    def reduce(grads, reduction):  # pylint: disable=unused-argument  (always "mean")
        grads = list(grads)
        if _graph_mode():
            from npu_bridge._allreduce import allreduce  # pylint: disable=import-outside-toplevel
            return [None if g is None else allreduce(g, True) for g in grads]
        _require_eager_collectives(what)
        from npu_device.distribute import _collectives  # pylint: disable=import-outside-toplevel
        present = [g for g in grads if g is not None]
        reduced = iter(_collectives.all_reduce(present, "mean", _ranks.rank_size())
                       if present else [])
        return [None if g is None else next(reduced) for g in grads]

    return reduce


def distribute_keras_optimizer(optimizer, what):
    """``optimizer`` (a Keras optimizer, or a name Keras resolves) with its gradients averaged
    over the ranks before they are applied: the same object, patched (see
    :mod:`npu_device.distribute._keras`)."""
    from npu_device.distribute import _keras  # pylint: disable=import-outside-toplevel
    optimizer = _keras.keras_optimizer(optimizer, what)
    return _keras.all_reduce_gradients(optimizer, "mean", all_reduce_mean(what))


def keras_session_backend(what):
    """The Keras backend with TF1 sessions (Keras 2); with Keras 3, an error saying so."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    backend = tf.compat.v1.keras.backend
    if not hasattr(backend, "get_session"):
        raise NotImplementedError(
            "%s in a TF1 graph is not emulated with this TensorFlow: its tf.keras is Keras 3, "
            "which has no TF1 sessions; TF1-style Keras scripts need Keras 2 (TensorFlow 2.15 and "
            "older). In TF2 code (eager model.fit) it works with Keras 3." % what)
    return backend


def broadcast_variables(variables, root_rank, what):
    """Rank ``root_rank``'s values assigned to ``variables`` on every rank, now: in a TF1 graph
    through ``hccl_ops.broadcast`` run in Keras's session, in TF2 code eagerly."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    variables = list(variables)
    if not variables:
        return
    if _graph_mode():
        backend = keras_session_backend(what)
        from npu_bridge.hccl import hccl_ops  # pylint: disable=import-outside-toplevel
        session = backend.get_session()  # initializes Keras's variables not yet initialized
        with session.graph.as_default():
            values = hccl_ops.broadcast(variables, root_rank)
            op = tf.group(*[v.assign(x) for v, x in zip(variables, values)])
        session.run(op)
        return
    _require_eager_collectives(what)
    from npu_device.distribute import _collectives  # pylint: disable=import-outside-toplevel
    values = _collectives.broadcast([tf.convert_to_tensor(v) for v in variables], root_rank,
                                    _ranks.rank_id())
    for v, x in zip(variables, values):
        v.assign(x)
