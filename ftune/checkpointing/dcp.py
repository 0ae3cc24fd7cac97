"""Sharded checkpoints of distributed runs with `torch.distributed.checkpoint` (DCP).

Each rank writes only its own shards of the model and optimizer (FSDP2 DTensors) and reads
back only what it needs, also under a different world size (DCP reshards on load). The state
dicts come from `torch.distributed.checkpoint.state_dict.get_state_dict`, which gives FQNs
without wrapper prefixes and an optimizer state keyed by parameter FQN instead of by index, so
the same files load into a differently wrapped (or unwrapped) model.

Everything here also runs in a single process without a process group: DCP then writes and
reads locally, so tests and single-device tools need no `torchrun`.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

_METADATA_FILE = ".metadata"  # DCP's own index, written by the coordinator after every shard


def _no_dist() -> bool:
    return not (dist.is_available() and dist.is_initialized())


@contextlib.contextmanager
def _quiet_single_process() -> Iterator[None]:
    # Without a process group DCP warns that it assumes a single process: that is the intent here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def save_sharded(
    path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> Path:
    """Save model (and optimizer) state as a DCP checkpoint in folder `path`; call on every rank.

    Args:
        path: destination folder (created).
        model: the model, FSDP2-sharded or plain.
        optimizer: its optimizer, or None to save the model only.

    Returns:
        The folder.
    """
    path = Path(path)
    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
    else:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optimizer": optim_sd}
    with _quiet_single_process():
        dcp.save(state, checkpoint_id=path, no_dist=_no_dist())
    return path


def load_sharded(
    path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> None:
    """Load a `save_sharded` checkpoint into `model` (and `optimizer`) in place; call on every rank.

    The model and optimizer must already be built (and sharded) the way they will be used; DCP
    fills their existing tensors. An optimizer that has not stepped yet is fine: `get_state_dict`
    creates its state first.

    Args:
        path: the folder written by `save_sharded`.
        model: the model to fill.
        optimizer: the optimizer to fill, or None to load the model only.

    Raises:
        FileNotFoundError: `path` is not a DCP checkpoint (names it).
    """
    path = Path(path)
    if not (path / _METADATA_FILE).is_file():
        raise FileNotFoundError(
            f"{str(path)!r} is not a complete DCP checkpoint (no {_METADATA_FILE} file): the save did not finish "
            "or the path is wrong. Pick another step folder."
        )
    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
        with _quiet_single_process():
            dcp.load(state, checkpoint_id=path, no_dist=_no_dist())
        set_model_state_dict(model, state["model"])
        return
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optimizer": optim_sd}
    with _quiet_single_process():
        dcp.load(state, checkpoint_id=path, no_dist=_no_dist())
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Gather an (FSDP2-sharded) model into one full state dict on CPU, on rank 0; call on every rank.

    Args:
        model: the model.

    Returns:
        The full state dict (plain CPU tensors) on rank 0 (or without a process group); an empty
        dict on other ranks, which hold no copy, so memory stays one model on one rank.
    """
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)
