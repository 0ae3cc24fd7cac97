"""Which process this is in a (possibly) distributed run, and how many there are: "only rank 0 logs"."""

import os

import torch.distributed as dist


def get_rank() -> int:
    """Global rank of this process: from the process group if one is initialised, else ``$RANK``, else 0."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def is_rank_zero() -> bool:
    """True on the process that logs, prints progress and writes metrics."""
    return get_rank() == 0


def world_size() -> int:
    """Ranks in the default process group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
