"""How ``npu_device.open()`` joins the ranks of ``python -m npu_loss_scale.emulate --ranks N``.

One rank (RANK_SIZE unset or 1): nothing to join. Several, in a ``--ranks`` run: the launcher
made the rank's eager context the task of the emulated cluster before the script started
(:func:`npu_loss_scale.ascend.ranks.join`; a variable created earlier would be unusable
afterwards), so opening the device records ``workers_num``/``worker_id``, and from then on
``npu_device.distribute`` and the loss-scale agreement run TensorFlow collectives eagerly and in
``tf.function``s. A TF1 program (``npu_device.compat.enable_v1()``) builds them into its graphs,
run by sessions on the task's server. Several outside a ``--ranks`` run: NotImplementedError
naming ``--ranks``. The device ``open()`` made is kept here too (:func:`global_npu_ctx`), for
``npu_device`` and ``npu_device.distribute`` alike.
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


_opened = []


def opened(make):
    """The device of this process: the one opened before, else ``make()`` kept as it."""
    if not _opened:
        _opened.append(make())
    return _opened[0]


def global_npu_ctx():
    """The device ``npu_device.open()`` returned in this process, or None before it."""
    return _opened[0] if _opened else None
