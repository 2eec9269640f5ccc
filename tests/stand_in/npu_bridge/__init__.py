"""Test stand-in of npu_bridge (see tests/stand_in/README.md). Not the real adapter."""
LOG = []


def reset():
    """Forgets the log and restores the defaults of the plugin and of the simulated ranks."""
    del LOG[:]
    from npu_bridge.estimator.npu import npu_plugin
    from npu_bridge.hccl import hccl_ops
    npu_plugin._MODE[0] = 0  # pylint: disable=protected-access
    hccl_ops.set_other_ranks_status(0.0)


def logged(kind):
    """The logged entries of one kind, in order."""
    return [entry for entry in LOG if entry[0] == kind]
