"""Stand-in of npu_bridge.hccl.hccl_ops: all-reduce over this rank and simulated other ranks."""
import tensorflow as tf

import npu_bridge

_OTHER_RANKS = [0.0]


def set_other_ranks_status(value):
    """What the other ranks contribute to every word of a summed status (0 = all finite)."""
    _OTHER_RANKS[0] = float(value)


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group="hccl_world_group"):
    if reduction != "sum":
        raise ValueError("stand-in allreduce supports 'sum' only; got %r" % (reduction,))
    summed = tensor + tf.constant(_OTHER_RANKS[0], tensor.dtype)
    npu_bridge.LOG.append(("allreduce", summed.op, {"fusion": fusion, "input": tensor}))
    return summed
