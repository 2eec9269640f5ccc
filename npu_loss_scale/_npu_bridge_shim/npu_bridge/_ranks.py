"""Rank numbers of the emulated run, from the environment variables Ascend launchers set (read
by :mod:`npu_loss_scale._internal.env`, the one parser of them)."""
from npu_loss_scale._internal.env import env_int, rank_id, rank_size  # noqa: F401  (this API)


def local_rank_size():
    return env_int("LOCAL_RANK_SIZE", rank_size())


def local_rank_id():
    return env_int("LOCAL_RANK_ID", env_int("DEVICE_ID", rank_id()))


def require_single_rank(what):
    size = rank_size()
    if size > 1:
        raise NotImplementedError(
            "%s: RANK_SIZE=%d, but this process is not one of the ranks of `python -m "
            "npu_loss_scale.emulate --ranks N`, so the CPU emulation of HCCL runs a single rank "
            "only. Start the script with --ranks %d, or run with RANK_SIZE=1."
            % (what, size, size))


# The hccl.manage.api / npu_init spellings (the group argument is accepted and ignored).
def get_rank_size(group="hccl_world_group"):  # pylint: disable=unused-argument
    return rank_size()


def get_rank_id(group="hccl_world_group"):  # pylint: disable=unused-argument
    return rank_id()


def get_local_rank_size(group="hccl_world_group"):  # pylint: disable=unused-argument
    return local_rank_size()


def get_local_rank_id(group="hccl_world_group"):  # pylint: disable=unused-argument
    return local_rank_id()
