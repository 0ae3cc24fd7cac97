"""What a step folder's `recipe_state.pt` holds, and how a recipe continues from it exactly."""

from __future__ import annotations

from typing import Any

from ftune.training.seed import get_rng_state, set_rng_state


def snapshot(step: int, *, optimizer: Any, scheduler: Any | None, loader: Any) -> dict[str, Any]:
    """The state that, restored, makes the next step identical to an uninterrupted run's.

    Args:
        step: optimizer steps done.
        optimizer: its `state_dict()` is saved (adapter-only on LoRA runs: only trainable params).
        scheduler: the LR scheduler, or None.
        loader: the stateful dataloader (epoch and position).

    Returns:
        {"step", "epoch", "optimizer", "lr_scheduler", "rng", "dataloader"}.
    """
    return {
        "step": step,
        "epoch": loader.state_dict()["epoch"],
        "optimizer": optimizer.state_dict(),
        "lr_scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": get_rng_state(),
        "dataloader": loader.state_dict(),
    }


def restore(state: dict[str, Any] | None, *, optimizer: Any, scheduler: Any | None, loader: Any) -> int:
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
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("lr_scheduler") is not None:
        scheduler.load_state_dict(state["lr_scheduler"])
    loader.load_state_dict(state["dataloader"])
    set_rng_state(state["rng"])
    return int(state["step"])
