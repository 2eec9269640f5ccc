"""Shim of ``hccl.split.api``: gradient split strategies (how the device fuses all-reduces).

They only tune communication on the device; with the single emulated rank there is none. The
arguments are checked and recorded in :data:`SPLIT_STRATEGY`.
"""
SPLIT_STRATEGY = {}


def _check(name, values):
    values = list(values)
    if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0
                         for v in values):
        raise ValueError("%s must be a non-empty list of non-negative numbers; got %r"
                         % (name, values))
    return values


def set_split_strategy_by_idx(idxList, group="hccl_world_group"):  # pylint: disable=invalid-name
    SPLIT_STRATEGY[group] = ("idx", _check("idxList", idxList))


def set_split_strategy_by_size(dataSizeList, group="hccl_world_group"):  # pylint: disable=invalid-name
    SPLIT_STRATEGY[group] = ("size", _check("dataSizeList", dataSizeList))
