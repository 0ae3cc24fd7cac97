"""The run's step budget and the cadence of its `*_every_n_steps` settings."""

from __future__ import annotations

import math


def total_steps(*, max_steps: int | None, epochs: int, batches_per_epoch: int, grad_accum_steps: int) -> int:
    """Optimizer steps in the run: `max_steps` when set, else every batch of `epochs` epochs.

    Raises:
        ValueError: when the run would have no step (names the settings that make it so).
    """
    per_epoch = math.ceil(batches_per_epoch / grad_accum_steps)
    steps = max_steps if max_steps is not None else epochs * per_epoch
    if steps < 1 or per_epoch < 1:
        raise ValueError(
            f"the run has no optimizer step: max_steps={max_steps}, epochs={epochs}, "
            f"{batches_per_epoch} batches per epoch. Use a larger dataset, a smaller batch_size, or max_steps >= 1."
        )
    return steps


def every(step: int, n: int | None) -> bool:
    """True when a `*_every_n_steps` setting of `n` fires at `step` (None: never)."""
    return n is not None and n > 0 and step % n == 0


def every_after(step: int, n: int | None) -> bool:
    """True once `step` steps are done and `n` is reached: ``fake_quant_after_n_steps`` (None: from the start)."""
    return n is None or step >= n
