"""Step checkpoints of a run: what `recipe_state.pt` holds, how it is written, and how a run continues from it.

The same functions serve single-device and FSDP2-sharded models: sharded weights and optimizer
state are gathered into full (unsharded) state dicts, so a step folder looks the same whichever
recipe wrote it, and `transformers` / `peft` load it.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
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
from ftune.config.recipe_kind import KIND_KEY, RECIPE_KEY, a_kind, objective_of, saved_objective
from ftune.modules.score_head import ScoreHead
from ftune.runtime.rank import get_rank, is_rank_zero, world_size
from ftune.runtime.seed import get_rng_state, set_rng_state
from ftune.training.features.fsdp import is_sharded
from ftune.training.features.optimizer_in_backward import OptimizerInBackward

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


def _threads_to_resume_at(saved: int | None) -> int | None:
    """The thread count a resumed run continues at: ``OMP_NUM_THREADS`` when set, else the saved run's.

    Matrix products and reductions split their sums by the thread count, so another count rounds the
    last bits differently (a loss 2e-7 apart after one step on the tiny test model, docs/checkpoints.md).
    The process's current count is whatever ran before in it (a library, a test, an earlier run)
    and never decides. None: nothing saved (a folder written before ftune recorded it) and no
    ``OMP_NUM_THREADS``: the current count stays.
    """
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return saved


def _restore_threads(saved: Any) -> None:
    """Continue at the saved run's thread count (or ``OMP_NUM_THREADS``), saying so when it changes anything."""
    saved = saved if isinstance(saved, int) and not isinstance(saved, bool) and saved > 0 else None
    now, target = torch.get_num_threads(), _threads_to_resume_at(saved)
    if target is None:
        return
    if target != now:
        torch.set_num_threads(target)
    if not is_rank_zero():
        return
    if saved is not None and target != saved:
        logger.warning(
            "the step folder was saved by a run at %d thread(s) and OMP_NUM_THREADS=%s sets %d: sums split "
            "over another thread count round differently, so the resumed steps differ from an uninterrupted "
            "run's in the last bits. Set OMP_NUM_THREADS=%d (or unset it) to resume bit for bit.",
            saved, os.environ.get("OMP_NUM_THREADS"), target, saved,
        )  # fmt: skip
    elif target != now:
        logger.warning(
            "resuming at %d thread(s), as the step folder was saved (this process was at %d): the resumed "
            "steps equal an uninterrupted run's bit for bit. OMP_NUM_THREADS=<n> resumes at n threads "
            "instead (the losses then differ from an uninterrupted run's in the last bits).",
            target, now,
        )  # fmt: skip


def _optimizer_state(model: nn.Module, optimizer: Any) -> dict[str, Any]:
    if isinstance(optimizer, OptimizerInBackward) or not is_sharded(model):
        return optimizer.state_dict()
    return get_optimizer_state_dict(model, optimizer, options=_FULL)


def running_recipe() -> str:
    """The name of the recipe this process runs: its file's stem (``ftune run``, torchrun and python alike)."""
    return Path(sys.argv[0]).stem


def _check_kind(state: dict[str, Any]) -> None:
    """Refuse a recipe_state.pt written by a run with another objective (DPO vs SFT vs KD).

    ``ftune run`` makes the same check before the model loads (ftune.config.recipe_kind); this one
    also covers a recipe run with python or torchrun directly.
    """
    saved_name, saved_kind = state.get(RECIPE_KEY), state.get(KIND_KEY)
    saved_kind = saved_objective(saved_name, saved_kind)  # GRPO folders saved before GRPO had its own kind
    name = running_recipe()
    kind = objective_of(name)
    if saved_name is None:
        logger.warning(
            "Migration 'recipe-kind-unrecorded': this recipe_state.pt was written before ftune recorded which "
            "recipe wrote a step folder, so it is taken to be %s's own (%s). Resume only from step folders "
            "of this kind of run; the next save records the kind.",
            name,
            kind or "kind unknown",
        )
    elif kind is not None and saved_kind is not None and saved_kind != kind:
        raise ValueError(
            f"recipe_state.pt was written by {saved_name}, {a_kind(saved_kind)} run, and {name} is {a_kind(kind)} recipe: "
            f"its step, schedule and data position belong to the other run. Continue that run with {saved_name}, "
            "or start this one from the folder's weights with a fresh optimizer: set "
            "checkpointer.resume_from_checkpoint=null and checkpointer.checkpoint_dir=<the step folder> "
            "(<the step folder>/merged for a LoRA run's folder)."
        )


def _check_param_counts(saved: dict[str, Any], optimizer: Any) -> None:
    """Say which run a mismatched optimizer state belongs to, before torch says "doesn't match the size"."""
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if not isinstance(groups, list):
        return
    before = [len(g.get("params", ())) for g in groups]
    now = [len(g["params"]) for g in optimizer.param_groups]
    if before != now:
        raise ValueError(
            f"recipe_state.pt's optimizer state covers {sum(before)} parameter tensor(s) in groups {before}, and "
            f"this run trains {sum(now)} in {now}: the step folder was written by a run that trains other "
            "weights (a LoRA run's folder given to a full fine-tune or the reverse, or other peft targets). "
            "Resume from a step folder written with this config, or start from its weights with a fresh "
            "optimizer: checkpointer.resume_from_checkpoint=null and checkpointer.checkpoint_dir=<the step folder>."
        )


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
        {"ftune_recipe", "ftune_recipe_kind", "step", "epoch", "optimizer", "lr_scheduler", "rng",
        "dataloader", "threads"}; call on every rank. "threads" is this process's intra-op thread
        count, which a resume continues at (:func:`restore`). The recipe's name and objective (None for a recipe the
        registry does not know) let a resume refuse a folder of another kind of run.
        "rng" is one state on a single device and a list, one per rank, when distributed.
    """
    return {
        # First, so that `ftune run` reads them without unpickling the rest (ftune.config.recipe_kind).
        RECIPE_KEY: running_recipe(),
        KIND_KEY: objective_of(running_recipe()),
        "step": step,
        "epoch": loader.state_dict()["epoch"],
        "optimizer": _optimizer_state(model, optimizer),
        "lr_scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": _rng_states(),
        "dataloader": loader.state_dict(),
        "threads": torch.get_num_threads(),
    }


def restore(
    state: dict[str, Any] | None, *, model: nn.Module, optimizer: Any, scheduler: Any | None, loader: Any
) -> int:
    """Load a `snapshot` back (nothing on a fresh run) and return the number of steps already done.

    The run continues at the thread count the snapshot was taken at (``OMP_NUM_THREADS``, when set,
    wins, with a warning that the resume is then exact only to the last bits): the process's own
    count is whatever ran before in it, so it does not decide.

    Raises:
        ValueError: when the saved state lacks a part this recipe needs (names it), was written by
            a recipe with another objective, or its optimizer state covers other parameters.
    """
    if state is None:
        return 0
    missing = [k for k in ("step", "optimizer", "rng", "dataloader") if k not in state]
    if missing:
        raise ValueError(
            f"recipe_state.pt has no {missing}: it was not written by this recipe. "
            "Resume from a step folder this recipe saved, or set checkpointer.resume_from_checkpoint=null."
        )
    _check_kind(state)
    if isinstance(optimizer, OptimizerInBackward) or not is_sharded(model):
        if not isinstance(optimizer, OptimizerInBackward):
            _check_param_counts(state["optimizer"], optimizer)
        optimizer.load_state_dict(state["optimizer"])
    else:
        set_optimizer_state_dict(
            model, optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True)
        )
    if scheduler is not None and state.get("lr_scheduler") is not None:
        scheduler.load_state_dict(state["lr_scheduler"])
    loader.load_state_dict(state["dataloader"])
    _restore_rng(state["rng"])
    _restore_threads(state.get("threads"))
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
        extra = {}
        if isinstance(score := getattr(model, "score", None), ScoreHead):  # a reward model's config
            extra["pad_token_id"] = score.pad_id
        checkpointer.save(step, weights, recipe_state=state, adapter_config=adapter_config, **extra)
    if world_size() > 1:
        dist.barrier()


def save_weights(checkpointer: Any, step: int, model: nn.Module) -> None:
    """Write a second trained model's weights (PPO's value model) to its own checkpointer's
    ``output_dir/step_<step>/`` (no recipe state: the run's own step folder holds it).

    Args:
        checkpointer: that model's checkpointer component (its own ``output_dir``).
        step: optimizer steps done.
        model: the model.
    """
    weights = model_state(model)
    if is_rank_zero():
        extra = {}
        if isinstance(score := getattr(model, "score", None), ScoreHead):  # a score-head model's config
            extra["pad_token_id"] = score.pad_id
        checkpointer.save(step, weights, **extra)
    if world_size() > 1:
        dist.barrier()
