"""PPO's advantages: Generalised Advantage Estimation over the response tokens, then whitening.

With per-token rewards ``r_t`` and the value model's estimates ``V_t`` (0 past the last value a row
keeps), as torchtune 0.6.1's ``rlhf.estimate_advantages`` (Schulman et al. 2015)::

    δ_t = r_t + γ·V_{t+1} - V_t            (V_{t+1} = 0 at the last position)
    A_t = δ_t + γ·λ·A_{t+1}
    returns_t = A_t + V_t                  (the value loss's targets, before whitening)

then the advantages are whitened over the batch's real response tokens, their mean kept (torchtune's
and TRL's ``whiten(shift_mean=True)``: ``(A - mean)/sqrt(var + 1e-8) + mean``, the variance with
Bessel's correction), and set to 0 at padding.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """The mean of ``x`` where ``mask`` is True (over ``dim``, or all of it); 0 where nothing is."""
    return (x * mask).sum(dim=dim) / (mask.sum(dim=dim) + 1e-8)


def masked_var(centered: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """The variance of already-centred values where ``mask`` is True (Bessel-corrected when ``unbiased``)."""
    var = masked_mean(centered.pow(2), mask)
    if unbiased:
        n = mask.sum() + 1e-8
        var = var * n / (n - 1)
    return var


def whiten(x: torch.Tensor, mask: torch.Tensor | None = None, *, shift_mean: bool = True) -> torch.Tensor:
    """``(x - mean)/sqrt(var + 1e-8)``, over ``mask``'s True positions (all when None); ``+ mean`` when
    ``shift_mean`` (PPO's advantages keep it, as torchtune and TRL)."""
    if mask is None:
        mean, var = x.mean(), x.var()
    else:
        mean = masked_mean(x, mask)
        var = masked_var(x - mean, mask)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    return out + mean if shift_mean else out


def gae(
    values: torch.Tensor,
    rewards: torch.Tensor,
    *,
    gamma: float,
    lmbda: float,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whitened GAE advantages and the returns of a batch of responses.

    Args:
        values: ``[b, t]`` the value model's estimates at the sampling step (0 where masked).
        rewards: ``[b, t]`` per-token rewards (``ppo_rewards``).
        gamma: the discount γ in [0, 1].
        lmbda: GAE's λ in [0, 1].
        mask: ``[b, t]`` bool, True at real response tokens: whitening reads only those, and the
            advantages are 0 elsewhere; None: every position.

    Returns:
        ``(advantages, returns)``, each ``[b, t]``.

    Raises:
        ValueError: mismatched shapes, or gamma or lmbda outside [0, 1].
    """
    if (
        values.shape != rewards.shape
        or values.dim() != 2
        or (mask is not None and mask.shape != values.shape)
    ):
        raise ValueError(
            f"gae: expected values, rewards and mask of one shape [b, t]; got values {list(values.shape)}, "
            f"rewards {list(rewards.shape)}, mask {None if mask is None else list(mask.shape)}."
        )
    for name, value in (("gamma", gamma), ("lmbda", lmbda)):
        if not 0 <= value <= 1:
            raise ValueError(
                f"gae: {name} must be in [0, 1], got {value!r}; torchtune's configs use gamma 1, lmbda 0.95."
            )
    running = torch.zeros_like(values[:, 0])
    steps = []
    for t in reversed(range(values.shape[1])):  # a python loop over t: the recursion runs backward in time
        following = values[:, t + 1] if t + 1 < values.shape[1] else torch.zeros_like(running)
        delta = rewards[:, t] + gamma * following - values[:, t]
        running = delta + gamma * lmbda * running
        steps.append(running)
    advantages = torch.stack(steps[::-1], dim=1)  # (b, t)
    returns = advantages + values
    advantages = whiten(advantages, mask)
    if mask is not None:
        advantages = advantages.masked_fill(~mask, 0.0)
    return advantages, returns
