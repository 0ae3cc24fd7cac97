"""PPO's per-token rewards: a KL penalty on every response token, the reward model's score on one.

For response token ``i`` of a row, with ``kl_i = log π(y_i) - log π_ref(y_i)`` (the sampled policy's
and the reference's log-probabilities, masked to 1 at padding by the recipe so that ``kl_i = 0`` there)::

    reward_i = -β·kl_i  (+ score at the row's score index)

as torchtune 0.6.1's ``rlhf.get_rewards_ppo`` and TRL's PPOTrainer compute them (Ziegler et al. 2019).
β is fixed (torchtune's ``kl_coeff``) or follows :class:`AdaptiveKLController` (Ziegler et al.'s
adaptive controller, which TRL's PPOTrainer shipped as ``AdaptiveKLController``): after each batch,
``β ← β·(1 + clip(KL/target - 1, -0.2, 0.2)·n/horizon)``, KL the batch's mean summed KL and ``n`` its
rows. torchtune 0.6.1 has only the fixed coefficient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PPORewards:
    """A batch's per-token rewards.

    Attributes:
        total: ``[b, t]`` the KL reward plus the score at each row's score index.
        kl: ``[b, t]`` ``log π - log π_ref``.
        kl_reward: ``[b, t]`` ``-β·kl``.
    """

    total: torch.Tensor
    kl: torch.Tensor
    kl_reward: torch.Tensor


def ppo_rewards(
    scores: torch.Tensor,
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    kl_coeff: float,
    score_index: torch.Tensor | None = None,
) -> PPORewards:
    """The per-token rewards of a batch of responses.

    Args:
        scores: ``[b]`` the reward model's scores (penalties applied).
        logps: ``[b, t]`` the sampling policy's log-probabilities of the response tokens.
        ref_logps: ``[b, t]`` the reference model's.
        kl_coeff: β (>= 0).
        score_index: ``[b]`` where each score is added (``ppo_responses.score_index``); None: the last position.

    Raises:
        ValueError: mismatched shapes or a negative coefficient.
    """
    if logps.shape != ref_logps.shape or logps.dim() != 2 or scores.shape != logps.shape[:1]:
        raise ValueError(
            "ppo_rewards: expected scores [b] and logps, ref_logps [b, t]; got scores "
            f"{list(scores.shape)}, logps {list(logps.shape)}, ref_logps {list(ref_logps.shape)}."
        )
    if not kl_coeff >= 0:
        raise ValueError(f"ppo_rewards: kl_coeff must be >= 0, got {kl_coeff!r}; set kl_coeff to 0 or more.")
    kl = logps - ref_logps
    kl_reward = -kl_coeff * kl
    if score_index is None:
        score_index = torch.full_like(scores, logps.shape[1] - 1, dtype=torch.long)
    total = kl_reward.scatter_add(1, score_index.unsqueeze(-1), scores.to(kl_reward.dtype).unsqueeze(-1))
    return PPORewards(total, kl, kl_reward)


class AdaptiveKLController:
    """Ziegler et al.'s adaptive KL coefficient: it moves β so that the policy's KL tracks a target.

    Args:
        init_kl_coeff: β at the start (> 0).
        target: the KL (summed over a response's tokens, averaged over responses) to track (> 0).
        horizon: how many responses the coefficient takes to correct a gap (> 0; 10000 in the paper).

    Raises:
        ValueError: a non-positive argument.
    """

    def __init__(self, init_kl_coeff: float, *, target: float, horizon: int) -> None:
        for name, value in (("init_kl_coeff", init_kl_coeff), ("target", target), ("horizon", horizon)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(
                    f"AdaptiveKLController: {name} must be a number > 0, got {value!r}; Ziegler et al. use "
                    "init_kl_coeff 0.2, target 6.0 and horizon 10000."
                )
        self.value, self.target, self.horizon = float(init_kl_coeff), float(target), int(horizon)

    def update(self, current_kl: float, n_steps: int) -> float:
        """Move β after a batch of ``n_steps`` responses whose mean summed KL was ``current_kl``; return β."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
        return self.value

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class FixedKLController:
    """A constant β (torchtune's ``kl_coeff``): the same interface as :class:`AdaptiveKLController`."""

    def __init__(self, kl_coeff: float) -> None:
        self.value = float(kl_coeff)

    def update(self, current_kl: float, n_steps: int) -> float:
        return self.value

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


def kl_controller(
    kl_coeff: float, *, target: float | None, horizon: int
) -> FixedKLController | AdaptiveKLController:
    """β's controller: fixed at ``kl_coeff`` when ``target`` is None, else adaptive from it."""
    if target is None:
        return FixedKLController(kl_coeff)
    return AdaptiveKLController(kl_coeff, target=target, horizon=horizon)
