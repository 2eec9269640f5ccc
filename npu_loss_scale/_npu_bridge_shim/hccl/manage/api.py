"""Shim of ``hccl.manage.api``: rank numbers of the single emulated rank (from the environment)."""
from npu_bridge._ranks import (get_local_rank_id, get_local_rank_size, get_rank_id,  # noqa: F401
                               get_rank_size)
