"""Step checkpoints of a run: what `recipe_state.pt` holds, how it is written, and how a run continues from it.

The same functions serve single-device and FSDP2-sharded models: sharded weights and optimizer
state are gathered into full (unsharded) state dicts, so a step folder looks the same whichever
recipe wrote it, and `transformers` / `peft` load it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from ftune.checkpointing.dcp import full_state_dict
from ftune.runtime.rank import get_rank, is_rank_zero, world_size
from ftune.runtime.seed import get_rng_state, set_rng_state
from ftune.training.fsdp import is_sharded
from ftune.training.optimizer_in_backward import OptimizerInBackward

logger = logging.getLogger(__name__)

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _rng_states() -> dict[str, Any] | list[dict[str, Any]] | None:
    """This process's generator states; with several ranks, every rank's, gathered on rank 0 (None elsewhere).

    Each rank draws its own amount (its dropout masks follow its own batches' shapes), so the
    ranks' generators differ after the first step and each must get its own state back.
    """
    if world_size() == 1:
        return get_rng_state()
    gathered: list[Any] | None = [None] * world_size() if is_rank_zero() else None
    dist.gather_object(get_rng_state(), gathered, dst=0)
    return gathered


def _restore_rng(saved: dict[str, Any] | list[dict[str, Any]]) -> None:
    if isinstance(saved, list):  # one state per rank (saved at world size > 1)
        if len(saved) != world_size():
            logger.warning(
                "recipe_state.pt holds the RNG states of %d ranks and this run has %d: rank r takes the "
                "state saved by rank r mod %d, so random draws (dropout, ...) will differ from an "
                "uninterrupted run's. Resume at world size %d to continue exactly.",
                len(saved), world_size(), len(saved), len(saved),
            )  # fmt: skip
        saved = saved[get_rank() % len(saved)]
    set_rng_state(saved)


def _optimizer_state(model: nn.Module, optimizer: Any) -> dict[str, Any]:
    if isinstance(optimizer, OptimizerInBackward) or not is_sharded(model):
        return optimizer.state_dict()
    return get_optimizer_state_dict(model, optimizer, options=_FULL)


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full model state dict (gathered on rank 0 when sharded; empty on other ranks)."""
    return full_state_dict(model) if is_sharded(model) else model.state_dict()


def snapshot(
    step: int, *, model: nn.Module, optimizer: Any, scheduler: Any | None, loader: Any
) -> dict[str, Any]:
    """The state that, restored, makes the next step identical to an uninterrupted run's.

    Args:
        step: optimizer steps done.
        model: the model (its FQNs key the optimizer state when sharded).
        optimizer: its state is saved (LoRA runs: the adapters' only).
        scheduler: the LR scheduler, or None.
        loader: the stateful dataloader (epoch and position; the same on every rank).

    Returns:
        {"step", "epoch", "optimizer", "lr_scheduler", "rng", "dataloader"}; call on every rank.
        "rng" is one state on a single device and a list, one per rank, when distributed.
    """
    return {
        "step": step,
        "epoch": loader.state_dict()["epoch"],
        "optimizer": _optimizer_state(model, optimizer),
        "lr_scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": _rng_states(),
        "dataloader": loader.state_dict(),
    }


def restore(
    state: dict[str, Any] | None, *, model: nn.Module, optimizer: Any, scheduler: Any | None, loader: Any
) -> int:
    """Load a `snapshot` back (nothing on a fresh run) and return the number of steps already done.

    Raises:
        ValueError: when the saved state lacks a part this recipe needs (names it).
    """
    if state is None:
        return 0
    missing = [k for k in ("step", "optimizer", "rng", "dataloader") if k not in state]
    if missing:
        raise ValueError(
            f"recipe_state.pt has no {missing}: it was not written by this recipe. "
            "Resume from a step folder this recipe saved, or set checkpointer.resume_from_checkpoint=null."
        )
    if isinstance(optimizer, OptimizerInBackward) or not is_sharded(model):
        optimizer.load_state_dict(state["optimizer"])
    else:
        set_optimizer_state_dict(
            model, optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True)
        )
    if scheduler is not None and state.get("lr_scheduler") is not None:
        scheduler.load_state_dict(state["lr_scheduler"])
    loader.load_state_dict(state["dataloader"])
    _restore_rng(state["rng"])
    return int(state["step"])


def save_checkpoint(
    checkpointer: Any,
    step: int,
    *,
    model: nn.Module,
    optimizer: Any,
    scheduler: Any | None,
    loader: Any,
    adapter_config: dict[str, Any] | None = None,
) -> None:
    """Write `output_dir/step_<step>/`: every rank helps gather, rank 0 writes, all wait for it.

    Args:
        checkpointer: the run's checkpointer component.
        step: optimizer steps done.
        model, optimizer, scheduler, loader: the run's objects.
        adapter_config: the peft settings on LoRA runs (adapters are saved in PEFT's format).
    """
    state = snapshot(step, model=model, optimizer=optimizer, scheduler=scheduler, loader=loader)
    weights = model_state(model)
    if is_rank_zero():
        checkpointer.save(step, weights, recipe_state=state, adapter_config=adapter_config)
    if world_size() > 1:
        dist.barrier()
