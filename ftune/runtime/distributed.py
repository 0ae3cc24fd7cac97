"""Process-group set-up for the distributed recipes: gloo on CPU, nccl on CUDA, world size 1 without torchrun."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: its global rank, the world size, and its local rank on the node."""

    rank: int
    world_size: int
    local_rank: int


# Whether init_distributed created the process group (and so destroy_distributed may end it). A
# caller that set up its own group, e.g. a test driver running several recipes, keeps it.
_OWNS_GROUP = False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_backend(device: torch.device) -> str:
    """gloo for CPU, ``cuda:nccl,cpu:gloo`` for CUDA (CPU tensors, e.g. for checkpoints, still reduce)."""
    return "cuda:nccl,cpu:gloo" if device.type == "cuda" else "gloo"


def init_distributed(device: torch.device | str = "cpu", backend: str | None = None) -> DistInfo:
    """Start the default process group from torchrun's environment, or as a world of one without it.

    Args:
        device: the device this rank trains on; picks the backend when `backend` is None.
        backend: an explicit backend string for ``torch.distributed.init_process_group``.

    Returns:
        This process's rank, world size and local rank.
    """
    device = torch.device(device)
    if "RANK" not in os.environ:  # plain `python recipe.py` / `ftune run recipe`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    global _OWNS_GROUP
    if not dist.is_initialized():
        dist.init_process_group(backend or default_backend(device))
        _OWNS_GROUP = True
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def destroy_distributed() -> None:
    """Wait for every rank, then tear down the process group init_distributed created (a clean exit)."""
    global _OWNS_GROUP
    if dist.is_initialized():
        dist.barrier()
        if _OWNS_GROUP:
            dist.destroy_process_group()
            _OWNS_GROUP = False
