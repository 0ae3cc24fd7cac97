"""Process-group set-up for the distributed recipes: gloo on CPU, nccl on CUDA, world size 1 without torchrun.

A collective that waits longer than the group's timeout (the recipes' ``dist_timeout_s``) fails, and
`explain_collective_failure` turns that failure, or a rank lost mid-collective, into one message (``ftune.config.run`` reports it).
"""

from __future__ import annotations

import datetime
import os
import re
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
# The timeout init_distributed gave the process group, in seconds (None: it did not start one).
_TIMEOUT_S: float | None = None


class CollectiveFailure(RuntimeError):
    """A collective that timed out (dist_timeout_s) or lost a rank, said in one message."""

    user_facing = True


def default_backend(device: torch.device) -> str:
    """gloo for CPU, ``cuda:nccl,cpu:gloo`` for CUDA (CPU tensors, e.g. for checkpoints, still reduce)."""
    return "cuda:nccl,cpu:gloo" if device.type == "cuda" else "gloo"


def init_distributed(
    device: torch.device | str = "cpu", backend: str | None = None, timeout_s: float | None = None
) -> DistInfo:
    """Start the default process group from torchrun's environment, or as a world of one without it.

    Args:
        device: the device this rank trains on; picks the backend when `backend` is None.
        backend: an explicit backend string for ``torch.distributed.init_process_group``.
        timeout_s: how long a collective waits for the other ranks before it fails (the recipes'
            ``dist_timeout_s``); None keeps torch's default.

    Returns:
        This process's rank, world size and local rank.
    """
    device = torch.device(device)
    # plain `python recipe.py` / `ftune run recipe`: a world of one, rendezvous in memory (no port
    # to pick: a free port can be taken by another process between the pick and the bind).
    alone = "RANK" not in os.environ
    global _OWNS_GROUP, _TIMEOUT_S
    if not dist.is_initialized():
        timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)
        store = {"store": dist.HashStore(), "rank": 0, "world_size": 1} if alone else {}
        dist.init_process_group(backend or default_backend(device), timeout=timeout, **store)
        _OWNS_GROUP, _TIMEOUT_S = True, timeout_s
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


# How gloo and the c10d store say that a wait ran out ("Timed out waiting 3000ms for recv operation")
# and that a peer is gone ("Connection closed by peer").
_TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)
_PEER_GONE = re.compile(r"connection (closed|reset) by peer", re.IGNORECASE)


def explain_collective_failure(exc: BaseException) -> CollectiveFailure | None:
    """`exc` as one message naming this rank, if it is a collective that timed out or lost a rank.

    Returns:
        The message (what happened, where, what to do: the key to raise for a timeout), or None
        when `exc` is something else or this process started no process group.
    """
    if _TIMEOUT_S is None or not isinstance(exc, RuntimeError) or isinstance(exc, CollectiveFailure):
        return None
    rank = os.environ.get("RANK", "?")
    detail = re.sub(r"^\[[^\]]*\]\s*", "", str(exc).strip().splitlines()[0])  # gloo's [source.cc:78] prefix
    if _PEER_GONE.search(detail):
        return CollectiveFailure(
            f"rank {rank} lost another rank in a collective ({detail.split('. ')[0]}): that rank stopped "
            "first, and its own error (printed above) is the one to fix; this rank stopped because of it."
        )
    if _TIMED_OUT.search(detail):
        return CollectiveFailure(
            f"rank {rank} waited more than dist_timeout_s={_TIMEOUT_S:g} s for the other ranks in a "
            f"collective ({detail}). Another rank is hung or far slower: its own output says where (a stuck "
            "data loader, a deadlock, a rank that stopped without exiting). If the ranks are only slow (a "
            f"long save or evaluation on one rank), raise the timeout, e.g. dist_timeout_s={2 * _TIMEOUT_S:g}."
        )
    return None


def destroy_distributed() -> None:
    """Wait for every rank, then tear down the process group init_distributed created (a clean exit)."""
    global _OWNS_GROUP
    if dist.is_initialized():
        dist.barrier()
        if _OWNS_GROUP:
            dist.destroy_process_group()
            _OWNS_GROUP = False
