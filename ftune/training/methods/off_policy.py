"""The off-policy correction of rollouts sampled beside training: truncated importance weights.

When generation runs beside training (``ftune.training.RolloutWorker``), a step may train on tokens that
an older copy of the policy sampled (at most ``max_off_policy_steps`` optimizer steps older, plus the
refresh period). The clipped GRPO ratio ``r = π / π_old`` is taken against the policy at the start of
the step (``π_old``, a forward on the batch), and each token's policy term is weighted by how much more
likely ``π_old`` finds it than the sampler did, capped at C (truncated importance sampling, as TRL 1.16's
``vllm_importance_sampling_correction`` with ``vllm_importance_sampling_mode="token_truncate"`` and verl's
``rollout_is``)::

    w_tok = min(exp(log π_old(tok) - log π_sampler(tok)), C)

C bounds the variance a very unlikely token could bring (TRL's default C = 3). A rollout sampled by the
current policy gets no weights at all (None): staleness 0 is exactly the synchronous loss.
"""

from __future__ import annotations

import math

import torch


def importance_weights(
    old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor, *, cap: float
) -> torch.Tensor:
    """Truncated per-token importance weights ``min(exp(old - sampling), cap)``; 1 where ``mask`` is 0.

    Args:
        old_logps: ``[b, t]`` the policy's log-probabilities at the step's start (detached).
        sampling_logps: ``[b, t]`` the sampler's, recorded when the tokens were drawn.
        mask: ``[b, t]`` 1 (or True) at trained tokens.
        cap: C > 0, the largest weight.

    Returns:
        ``[b, t]`` fp32, detached.

    Raises:
        ValueError: shapes differ or cap is not a finite number > 0.
    """
    if not (isinstance(cap, (int, float)) and math.isfinite(cap) and cap > 0):
        raise ValueError(f"importance_weights: cap must be a finite number > 0 (TRL uses 3.0), got {cap!r}.")
    if old_logps.shape != sampling_logps.shape or mask.shape != old_logps.shape:
        raise ValueError(
            f"importance_weights: old_logps {list(old_logps.shape)}, sampling_logps {list(sampling_logps.shape)} "
            f"and mask {list(mask.shape)} must have one shape [b, t]."
        )
    diff = (old_logps.detach().float() - sampling_logps.float()) * mask.float()
    return torch.exp(diff).clamp(max=cap)


def shift_logps(logps: torch.Tensor) -> torch.Tensor:
    """Sampled log-probabilities at their tokens' positions ``[b, s]`` moved to the positions that predict
    them (as ``ftune.training.on_device`` shifts labels): ``out[:, t] = logps[:, t + 1]``, 0 last."""
    return torch.cat([logps[:, 1:], torch.zeros_like(logps[:, :1])], dim=1)
