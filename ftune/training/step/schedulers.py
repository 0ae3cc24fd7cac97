"""Learning-rate schedules with linear warmup, as ``LambdaLR`` factories usable as config components.

Each takes the optimizer positionally (the recipe passes it) and everything else by keyword::

    lr_scheduler:
      _component_: ftune.training.cosine_with_warmup
      num_warmup_steps: 100

    scheduler = config.instantiate(cfg.lr_scheduler, optimizer, num_training_steps=s.max_steps)

Step ``t`` below is the number of optimizer steps already taken: the first step uses the
multiplier at ``t = 0``. Warmup is ``t / num_warmup_steps`` (so the first step's LR is 0 when
there is warmup, as in torchtune and transformers); the decay reaches ``min_lr_ratio`` at
``t = num_training_steps`` and stays there.
"""

import logging
import math

import torch.distributed as dist
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

logger = logging.getLogger(__name__)


def _check(
    name: str, num_warmup_steps: int, num_training_steps: int | None, min_lr_ratio: float = 0.0
) -> int:
    """Check the arguments; return the warm-up, clamped to the run's length (a short run must work)."""
    for key, value in (("num_warmup_steps", num_warmup_steps), ("num_training_steps", num_training_steps)):
        if value is None and key == "num_training_steps":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: {key} must be an int >= 0, got {value!r}.")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"{name}: min_lr_ratio must be in [0, 1], got {min_lr_ratio!r}.")
    if num_training_steps is not None and num_warmup_steps > num_training_steps:
        # A smoke test (max_steps=3) with a shipped config (100 warm-up steps) should run, as in
        # transformers and Lightning, where a warm-up past the end simply never finishes; we clamp it
        # so the decay still ends at min_lr_ratio, and say so once (rank 0 only under torchrun).
        if not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0:
            logger.warning(
                "%s: num_warmup_steps (%d) is larger than the run's num_training_steps (%d); "
                "warming up over %d steps instead (set lr_scheduler.num_warmup_steps to silence this).",
                name,
                num_warmup_steps,
                num_training_steps,
                num_training_steps,
            )
        return num_training_steps
    return num_warmup_steps


def _warmup(step: int, num_warmup_steps: int) -> float | None:
    # None means "warmup is over".
    return step / num_warmup_steps if step < num_warmup_steps else None


def _decay_progress(step: int, num_warmup_steps: int, num_training_steps: int) -> float:
    span = max(1, num_training_steps - num_warmup_steps)
    return min(1.0, (step - num_warmup_steps) / span)


def constant_with_warmup(
    optimizer: Optimizer, *, num_warmup_steps: int = 0, num_training_steps: int | None = None
) -> LambdaLR:
    """Linear warmup to the optimizer's LR, then constant.

    Args:
        optimizer: the optimizer whose LR is scheduled.
        num_warmup_steps: steps of linear warmup from 0.
        num_training_steps: accepted so every schedule is called the same way; only checked
            against ``num_warmup_steps``.

    Returns:
        The scheduler; call ``step()`` once after each optimizer step.

    Raises:
        ValueError: if a step count is negative. A warm-up longer than training is clamped to it,
            with one warning.
    """
    num_warmup_steps = _check("constant_with_warmup", num_warmup_steps, num_training_steps)

    def multiplier(step: int) -> float:
        warm = _warmup(step, num_warmup_steps)
        return 1.0 if warm is None else warm

    return LambdaLR(optimizer, multiplier)


def linear_with_warmup(
    optimizer: Optimizer, *, num_warmup_steps: int, num_training_steps: int, min_lr_ratio: float = 0.0
) -> LambdaLR:
    """Linear warmup, then linear decay to ``min_lr_ratio`` times the LR at ``num_training_steps``.

    Args:
        optimizer: the optimizer whose LR is scheduled.
        num_warmup_steps: steps of linear warmup from 0.
        num_training_steps: total optimizer steps of the run.
        min_lr_ratio: final LR as a fraction of the optimizer's LR.

    Returns:
        The scheduler; call ``step()`` once after each optimizer step.

    Raises:
        ValueError: for negative step counts or a ratio outside [0, 1]. A warm-up longer than
            training is clamped to it, with one warning.
    """
    num_warmup_steps = _check("linear_with_warmup", num_warmup_steps, num_training_steps, min_lr_ratio)

    def multiplier(step: int) -> float:
        warm = _warmup(step, num_warmup_steps)
        if warm is not None:
            return warm
        return 1.0 - (1.0 - min_lr_ratio) * _decay_progress(step, num_warmup_steps, num_training_steps)

    return LambdaLR(optimizer, multiplier)


def cosine_with_warmup(
    optimizer: Optimizer, *, num_warmup_steps: int, num_training_steps: int, min_lr_ratio: float = 0.0
) -> LambdaLR:
    """Linear warmup, then a half cosine from the LR down to ``min_lr_ratio`` times it.

    Args:
        optimizer: the optimizer whose LR is scheduled.
        num_warmup_steps: steps of linear warmup from 0.
        num_training_steps: total optimizer steps of the run.
        min_lr_ratio: final LR as a fraction of the optimizer's LR.

    Returns:
        The scheduler; call ``step()`` once after each optimizer step.

    Raises:
        ValueError: for negative step counts or a ratio outside [0, 1]. A warm-up longer than
            training is clamped to it, with one warning.
    """
    num_warmup_steps = _check("cosine_with_warmup", num_warmup_steps, num_training_steps, min_lr_ratio)

    def multiplier(step: int) -> float:
        warm = _warmup(step, num_warmup_steps)
        if warm is not None:
            return warm
        cosine = 0.5 * (1.0 + math.cos(math.pi * _decay_progress(step, num_warmup_steps, num_training_steps)))
        return min_lr_ratio + (1.0 - min_lr_ratio) * cosine

    return LambdaLR(optimizer, multiplier)
