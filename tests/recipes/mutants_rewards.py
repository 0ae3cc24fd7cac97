"""The mutants of the reward-model feature (tests/recipes/features_rewards.py): the score read at the
last position whatever the padding, the margin column or the centring term dropped from the loss, the
head left frozen under LoRA. Merged into tests/recipes/mutants.py's MUTANTS; same contract."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from ftune import training
from ftune.modules.score_head import ScoreHead
from ftune.training.methods.reward_loss import RewardLoss


def _patch(owner: Any, attr: str, make: Callable[[Any], Any]) -> Callable[[pytest.MonkeyPatch], None]:
    def apply(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(owner, attr, make(getattr(owner, attr)))

    return apply


def _last_position(real):
    def last_tokens(self, tokens):
        return torch.full((tokens.shape[0],), tokens.shape[1] - 1, device=tokens.device)

    return last_tokens


def _no_margin(real):
    return lambda self, chosen, rejected, margins=None: real(self, chosen, rejected, None)


def _no_centring(real):
    def forward(self, chosen, rejected, margins=None):
        coef, self.center_rewards_coefficient = self.center_rewards_coefficient, None
        try:
            return real(self, chosen, rejected, margins)
        finally:
            self.center_rewards_coefficient = coef

    return forward


def _head_frozen(real):
    def apply_peft(node, model, adapter, **kwargs):
        out = real(node, model, adapter, **kwargs)
        if isinstance(getattr(model, "score", None), ScoreHead):
            model.score.requires_grad_(False)
        return out

    return apply_peft


def reward_mutants(mutant: type) -> dict[str, tuple]:
    """MUTANTS entries of the reward-model features, built with mutants.py's `Mutant`."""
    return {
        "reward_model": (
            mutant(
                "score_at_last_position",
                "ScoreHead.last_tokens",
                _patch(ScoreHead, "last_tokens", _last_position),
            ),
            mutant("margin_dropped", "RewardLoss.forward", _patch(RewardLoss, "forward", _no_margin)),
            mutant("centring_dropped", "RewardLoss.forward", _patch(RewardLoss, "forward", _no_centring)),
            mutant(
                "head_frozen_under_lora", "training.apply_peft", _patch(training, "apply_peft", _head_frozen)
            ),
        ),
    }
