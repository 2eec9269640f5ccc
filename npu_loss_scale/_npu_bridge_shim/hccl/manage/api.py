"""Shim of ``hccl.manage.api``: rank numbers of the emulated run (from the environment)."""
from npu_bridge._ranks import (get_local_rank_id, get_local_rank_size, get_rank_id,  # noqa: F401
                               get_rank_size, rank_size)

_groups = {}


def create_group(group, rank_num, rank_ids):
    """Records a rank group; with one emulated rank only the group of rank 0 makes sense."""
    rank_ids = list(rank_ids)
    if rank_num != len(rank_ids) or any(r >= rank_size() or r < 0 for r in rank_ids):
        raise ValueError("create_group(%r): rank_num must equal len(rank_ids) and every rank id "
                         "be in [0, RANK_SIZE=%d); got rank_num=%r, rank_ids=%r"
                         % (group, rank_size(), rank_num, rank_ids))
    _groups[group] = rank_ids


def destroy_group(group):
    _groups.pop(group, None)


def get_world_rank_from_group_rank(group, group_rank_id):
    return _groups[group][group_rank_id] if group in _groups else group_rank_id


def get_group_rank_from_world_rank(world_rank_id, group):
    return _groups[group].index(world_rank_id) if group in _groups else world_rank_id
