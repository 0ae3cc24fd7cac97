"""GRPO's rewards: group-relative advantages, and the reward figures a step logs under TRL's names.

A completion's advantage is its reward minus its group's mean, divided by the group's standard
deviation (unbiased, plus 1e-4, as TRL does) unless ``scale_rewards=False`` (Dr. GRPO).

The logged figures are TRL 1.16's (``GRPOTrainer._generate_and_score_completions``): ``reward`` the
mean weighted total, ``reward_std`` its sample (Bessel-corrected) std, ``rewards/<name>/mean`` and
``/std`` the same of each reward, ``frac_reward_zero_std`` the share of groups whose rewards are all
equal. TRL takes them over a generation batch: the step's completions, on every rank, with its
default ``steps_per_generation == gradient_accumulation_steps``. So does a training step here. A
validation pass takes them over all its completions (TRL's evaluation averages its batches' figures:
the same means, and for the stds the mean of the batches' stds).

A micro-batch returns them as metrics with their own counts (:func:`reward_metrics`: completions
for the rewards, groups for ``frac_reward_zero_std``), which ``StepLoss`` and ``validate`` add over
micro-batches and ranks before reading each one's value.
"""

from __future__ import annotations

import torch

from ftune.training.step.metric import Metric

#: Added to a group's reward std before dividing (TRL's value).
STD_EPSILON = 1e-4


def _check_rewards(rewards: torch.Tensor, group_size: int, where: str) -> torch.Tensor:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(
            f"{where}: group_size must be an int >= 2 (completions compared per prompt), got {group_size!r}."
        )
    if rewards.dim() != 1 or rewards.numel() == 0 or rewards.numel() % group_size:
        raise ValueError(
            f"{where}: rewards must be 1-D [prompts * group_size] with group_size={group_size} "
            f"(the completions of a prompt consecutive), got shape {list(rewards.shape)}."
        )
    bad = (~torch.isfinite(rewards)).nonzero().flatten().tolist()
    if bad:
        raise ValueError(
            f"{where}: rewards must be finite numbers; got {rewards[bad[0]].item()} at completion {bad[0]} "
            f"({len(bad)} non-finite in all). Check the reward functions."
        )
    return rewards.float().view(-1, group_size)


def group_advantages(rewards: torch.Tensor, group_size: int, *, scale_rewards: bool) -> torch.Tensor:
    """Group-relative advantages: reward minus its group's mean, over the group's std if ``scale_rewards``.

    Args:
        rewards: ``[prompts * group_size]``, the ``group_size`` completions of a prompt consecutive.
        group_size: completions per prompt (G >= 2).
        scale_rewards: divide by the group's unbiased std + 1e-4 (GRPO, TRL's "group"); False keeps
            the centred rewards (Dr. GRPO, TRL's "none").

    Returns:
        ``[prompts * group_size]`` fp32.

    Raises:
        ValueError: for a group_size below 2, a shape that does not split into groups, or a
            non-finite reward.
    """
    if not isinstance(scale_rewards, bool):
        raise ValueError(f"group_advantages: scale_rewards must be True or False, got {scale_rewards!r}.")
    grouped = _check_rewards(rewards, group_size, "group_advantages")  # (prompts, G)
    advantages = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards:
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + STD_EPSILON)  # Bessel-corrected
    return advantages.reshape(-1)


def zero_variance_share(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """The share of groups whose rewards are all equal: their advantages are 0, they teach nothing.

    A group counts when its unbiased std is within 1e-8 of 0 (TRL's ``frac_reward_zero_std``).

    Args:
        rewards, group_size: as for :func:`group_advantages`.

    Returns:
        fp32 scalar in [0, 1].
    """
    grouped = _check_rewards(rewards, group_size, "zero_variance_share")
    std = grouped.std(dim=1)
    return torch.isclose(std, torch.zeros_like(std)).float().mean()


def reward_metrics(
    total: torch.Tensor, per_reward: dict[str, torch.Tensor], group_size: int
) -> dict[str, Metric]:
    """One rollout's reward figures under TRL's names, as metrics that add over micro-batches and ranks.

    Args:
        total: the weighted totals ``[prompts * group_size]``.
        per_reward: each reward's values, the same shape.
        group_size: completions per prompt.

    Returns:
        ``reward`` and ``rewards/<name>/mean`` (means over completions), ``reward_std`` and
        ``rewards/<name>/std`` (sample stds over every completion added), ``frac_reward_zero_std``
        (the share of groups whose rewards are all equal).
    """
    grouped = _check_rewards(total, group_size, "reward_metrics")
    zero = zero_variance_share(total, group_size) * grouped.shape[0]
    out = {
        "reward": Metric.mean(total),
        "reward_std": Metric.std(total),
        "frac_reward_zero_std": Metric.ratio(zero, float(grouped.shape[0])),
    }
    for name, values in per_reward.items():
        out[f"rewards/{name}/mean"] = Metric.mean(values)
        out[f"rewards/{name}/std"] = Metric.std(values)
    return out
