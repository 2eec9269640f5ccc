"""How ``npu_device.open()`` joins the ranks of ``python -m npu_loss_scale.emulate --ranks N``.

One rank (RANK_SIZE unset or 1): nothing to join. Several, in a ``--ranks`` run: the launcher
made the rank's eager context the task of the emulated cluster before the script started
(:func:`npu_loss_scale.ascend.ranks.join`; a variable created earlier would be unusable
afterwards), so opening the device records ``workers_num``/``worker_id``, and from then on
``npu_device.distribute`` and the loss-scale agreement run TensorFlow collectives eagerly and in
``tf.function``s. A TF1 program (``npu_device.compat.enable_v1()``) builds them into its graphs,
run by sessions on the task's server. Several outside a ``--ranks`` run: NotImplementedError
naming ``--ranks``.
"""
from npu_bridge import _ranks
from npu_bridge._shim import NotEmulatedError


def join(what):
    """``(workers_num, worker_id)`` of this process after joining the emulated cluster."""
    size = _ranks.rank_size()
    if size <= 1:
        return 1, 0
    from npu_loss_scale.ascend import ranks  # pylint: disable=import-outside-toplevel
    if ranks.cluster() is None:
        _ranks.require_single_rank(what)
    rank = _ranks.rank_id()
    if not 0 <= rank < size:
        raise ValueError("environment variable RANK_ID must be in [0, RANK_SIZE=%d); got %d"
                         % (size, rank))
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if tf.compat.v1.executing_eagerly_outside_functions() and not ranks.eager_joined():
        raise NotEmulatedError(
            "%s: TF2 (eager) collectives across the ranks are emulated in TF2 mode only; this "
            "rank was started with --tf1. Leave out --tf1, or call "
            "npu_device.compat.enable_v1() before %s" % (what, what), name="npu_device")
    return size, rank
