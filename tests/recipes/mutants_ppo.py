"""The mutants of the PPO feature (tests/recipes/features_ppo.py): the KL penalty dropped from the rewards,
the value clip dropped from the loss, GAE's lambda ignored. Merged into tests/recipes/mutants.py's
MUTANTS; same contract."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ftune.training.methods import ppo_trajectory
from ftune.training.methods.ppo_loss import PPOLoss


def _patch(owner: Any, attr: str, make: Callable[[Any], Any]) -> Callable[[pytest.MonkeyPatch], None]:
    def apply(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(owner, attr, make(getattr(owner, attr)))

    return apply


def _no_kl(real):
    return lambda scores, logps, ref_logps, kl_coeff, score_index=None: real(
        scores, logps, ref_logps, 0.0, score_index
    )


def _no_value_clip(real):
    def forward(self, *args, **kwargs):
        clip, self.value_clip_range = self.value_clip_range, float("inf")
        try:
            return real(self, *args, **kwargs)
        finally:
            self.value_clip_range = clip

    return forward


def _lambda_ignored(real):
    return lambda values, rewards, *, gamma, lmbda, mask=None: real(
        values, rewards, gamma=gamma, lmbda=1.0, mask=mask
    )


def ppo_mutants(mutant: type) -> dict[str, tuple]:
    """MUTANTS entries of the PPO feature, built with mutants.py's `Mutant`."""
    return {
        "ppo": (
            mutant(
                "kl_penalty_dropped",
                "ppo_trajectory.ppo_rewards",
                _patch(ppo_trajectory, "ppo_rewards", _no_kl),
            ),
            mutant("value_clip_dropped", "PPOLoss.forward", _patch(PPOLoss, "forward", _no_value_clip)),
            mutant(
                "gae_lambda_ignored", "ppo_trajectory.gae", _patch(ppo_trajectory, "gae", _lambda_ignored)
            ),
        ),
    }
