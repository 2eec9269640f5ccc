"""The collective ops behind ``npu_device.distribute`` in a rank of ``--ranks N`` (CPU shim).

HCCL on the device is replaced by TensorFlow's collective ops (``CollectiveReduceV2`` and the
broadcast pair) across the N processes of ``python -m npu_loss_scale.emulate --ranks N``:

* TF2 code (eager, ``tf.function``, Keras): the launcher made the rank's eager context a task
  of the cluster (:func:`npu_loss_scale.ascend.ranks.join`). Every collective takes its
  instance key when it *runs* - eagerly at once, inside a ``tf.function`` through a call-time
  capture, as ``tf.distribute`` does - so ranks that trace their functions at different times
  still pair the same collectives, as long as every rank runs them in the same order (HCCL asks
  the same). The keys, in a group key of their own, are reused in turn (see KEYS_PER_SIGNATURE).
* TF1 graphs (``npu_device.compat.enable_v1()``): the ops are built into the graph with the
  session group's keys (``npu_loss_scale.ascend.ranks.cluster()``, in build order, as the
  shim's ``hccl_ops`` do) and run in sessions on the task's server.

Tensors of one dtype travel in one collective (flattened and concatenated), as HCCL fuses them.
"""
import functools
import itertools
import threading

import tensorflow as tf

from npu_bridge._shim import NotEmulatedError
from npu_loss_scale._internal.compat import collectives

_MERGE = {"sum": "Add", "mean": "Add", "max": "Max", "min": "Min", "prod": "Mul"}
REDUCTIONS = ("mean", "sum", "max", "min", "prod")
# dtypes TensorFlow's CPU collectives carry; bool travels as int32.
_CARRIED = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64)

# Instance keys of the TF2 collectives. TensorFlow keeps a record per key it has seen (measured:
# about 1.6 KB each, never freed) and a key remembers the shape it first carried, so a new key
# per run would grow without bound. A collective of a known shape takes its keys in turn from a
# ring of KEYS_PER_SIGNATURE keys of its signature (kind, dtype, shape, reduction), in the order
# the runs happen on every rank; a shape unknown until it runs takes a key of its own above
# ONE_OFF_KEYS. A key comes round again only after KEYS_PER_SIGNATURE later runs of the same
# signature: by then its run has finished, since eager collectives run one at a time and a
# function runs its all-reduces in program order (TF's automatic control dependencies order
# CollectiveReduceV2), so few are ever in flight (broadcasts are fused into one per dtype).
KEYS_PER_SIGNATURE = 64
ONE_OFF_KEYS = 2 ** 30
_lock = threading.Lock()
_signatures = {}
_runs = {}
_one_off_keys = itertools.count(ONE_OFF_KEYS)


def eager_group_key():
    """The group key of the eager collectives (next to the session group's key)."""
    from npu_loss_scale.agreement import cluster as group_settings  # pylint: disable=import-outside-toplevel
    return group_settings.DEFAULT_GROUP_KEY + 1


def cluster():
    from npu_loss_scale.ascend import ranks  # pylint: disable=import-outside-toplevel
    return ranks.cluster()


def eager_timeout():
    """Seconds a TF2 collective waits for the other ranks: ``$NPU_LOSS_SCALE_AGREEMENT_TIMEOUT``
    when set, else 0 (no limit).

    TensorFlow starts, for every collective run with a timeout, timer threads that sleep for
    the whole timeout (measured: 2 per collective on TF 2.15), so a timeout of T seconds keeps
    about 2 x (collectives per second) x T threads alive: with the 300 s default of the
    session path, a fast TF2 loop runs out of threads within a minute. Without a timeout a rank
    that fails still stops the others (the launcher terminates them); the timeout bounds a rank
    that stalls or runs its collectives in another order.
    """
    import os  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.agreement import cluster as group_settings  # pylint: disable=import-outside-toplevel
    if not os.environ.get(group_settings.TIMEOUT_ENV_VAR, "").strip():
        return 0
    return group_settings.timeout_from_env()


def _run_key(signature):
    """The instance key of the next run of a collective of ``signature`` (see the docstring)."""
    with _lock:
        key = None
        if signature[2] is not None:
            index = _signatures.setdefault(signature, len(_signatures))
            run = _runs.get(signature, 0)
            _runs[signature] = run + 1
            key = 1 + index * KEYS_PER_SIGNATURE + run % KEYS_PER_SIGNATURE
        if key is None or key >= ONE_OFF_KEYS:
            key = next(_one_off_keys)
    with tf.device("CPU:0"):
        return tf.constant(key, tf.int32)


def _call_time_key(signature):
    """The key of this run: at once when eager, else through a call-time capture of the
    outermost function being built (cond and while bodies cannot hold one)."""
    if tf.executing_eagerly():
        return _run_key(signature)
    graph = tf.compat.v1.get_default_graph()
    while getattr(graph, "is_control_flow_graph", False):
        graph = graph.outer_graph
    if not getattr(graph, "building_function", False):
        raise NotEmulatedError("npu_device.distribute: a collective outside an eager program's "
                               "functions and outside a TF1 graph is not emulated",
                               name="npu_device")
    with graph.as_default():
        return graph.capture_call_time_value(functools.partial(_call_time_key, signature),
                                             tf.TensorSpec([], tf.int32))


def _keys(what):
    """(group_key, signature -> instance key of the next run, group size, device, timeout)."""
    group = cluster()
    if tf.compat.v1.executing_eagerly_outside_functions():
        from tensorflow.python.ops import control_flow_util  # pylint: disable=import-outside-toplevel
        if not tf.executing_eagerly() and control_flow_util.GraphOrParentsInXlaContext(
                tf.compat.v1.get_default_graph()):
            raise NotEmulatedError(
                "%s inside an XLA-compiled function (jit_compile=True) is not emulated: the "
                "collectives of the emulated ranks run outside XLA, as the device runs "
                "tf.functions without XLA. Compile the function or the model with "
                "jit_compile=False." % what, name="npu_device")
        return eager_group_key(), _call_time_key, group.group_size, group.device, \
            eager_timeout()
    return group.group_key, lambda signature: group.next_instance_key(), group.group_size, \
        group.device, group.timeout


def _static(tensor):
    """The shape as a tuple when fully known, else None."""
    return tuple(tensor.shape.as_list()) if tensor.shape.is_fully_defined() else None


def _carried(tensor, what):
    if tensor.dtype in _CARRIED:
        return tensor
    if tensor.dtype == tf.bool:
        return tf.cast(tensor, tf.int32)
    raise TypeError("%s: dtype %s cannot travel between the emulated ranks; accepted: %s, bool"
                    % (what, tensor.dtype.name, ", ".join(d.name for d in _CARRIED)))


def _fused(tensors, run_one):
    """``run_one(flat_tensor)`` once per dtype over ``tensors`` concatenated; results in order."""
    by_dtype = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    out = [None] * len(tensors)
    for indices in by_dtype.values():
        group = [tensors[i] for i in indices]
        if len(group) == 1:
            out[indices[0]] = run_one(group[0])
            continue
        flat = tf.concat([tf.reshape(t, [-1]) for t in group], 0)
        pieces = tf.split(run_one(flat), tf.stack([tf.size(t) for t in group]), num=len(group))
        for i, t, piece in zip(indices, group, pieces):
            piece = tf.reshape(piece, tf.shape(t))
            piece.set_shape(t.shape)
            out[i] = piece
    return out


def _prepare(what, tensors):
    """The group's keys for ``what``, the tensors' dtypes, and the tensors as carried."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    return _keys(what), [t.dtype for t in tensors], [_carried(t, what) for t in tensors]


def all_reduce(tensors, reduction, workers_num, name=None):
    """``tensors`` (a list) reduced over the ranks; ``mean`` divides the sum by ``workers_num``
    (floats keep their dtype, integers give the float quotient, as on the device)."""
    (group_key, next_key, size, device, timeout), originals, carried = _prepare(
        "npu_device.distribute.all_reduce", tensors)

    def run_one(flat):
        with tf.device(device):
            key = next_key(("reduce", flat.dtype.name, _static(flat), reduction))
            return collectives.all_reduce_v2(
                flat, group_size=size, group_key=group_key, instance_key=key,
                merge_op=_MERGE[reduction], final_op="Id", timeout=timeout, name=name)

    reduced = _fused(carried, run_one)
    out = []
    for value, dtype in zip(reduced, originals):
        if dtype == tf.bool:
            value = tf.cast(value, tf.bool)
        if reduction == "mean":
            if value.dtype.is_floating:
                value = value * tf.cast(1.0 / workers_num, value.dtype)
            else:
                value = tf.math.truediv(value, tf.cast(workers_num, value.dtype))
        out.append(value)
    return out


def broadcast(tensors, root_rank, my_rank):
    """``tensors`` (a list) of rank ``root_rank``, on every rank (exact bits)."""
    from tensorflow.python.ops import collective_ops  # pylint: disable=import-outside-toplevel
    (group_key, next_key, size, device, timeout), originals, carried = _prepare(
        "npu_device.distribute.broadcast", tensors)

    def run_one(flat):
        with tf.device(device):
            key = next_key(("broadcast", flat.dtype.name, _static(flat)))
            if my_rank == root_rank:
                return collective_ops.broadcast_send_v2(
                    flat, group_size=size, group_key=group_key, instance_key=key,
                    timeout=timeout)
            return collective_ops.broadcast_recv_v2(
                tf.shape(flat), flat.dtype, group_size=size, group_key=group_key,
                instance_key=key, timeout=timeout)

    out = _fused(carried, run_one)
    return [tf.cast(v, tf.bool) if d == tf.bool else v for v, d in zip(out, originals)]
