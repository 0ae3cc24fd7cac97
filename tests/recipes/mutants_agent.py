"""The agent recipe's mutants (tests/recipes/mutants.py's table continues here): environment tokens trained,
a stale policy used as the current one, the importance correction dropped, a worker never refreshed."""

from __future__ import annotations

import torch

import ftune.training.methods.off_policy_loader as off_policy_loader
from ftune import training
from ftune.generation.multi_turn import Trajectories
from ftune.training.methods.rollout_worker import ProcessSampler


def _all_tokens_labelled(real):
    def training_batch(self):
        out = real(self)
        for i, row in enumerate(self.rows):
            start = len(row.prompt)
            out["labels"][i, start : start + len(row.tokens)] = torch.tensor(row.tokens)
        return out

    return training_batch


def _never_stale(real):
    def sampled(rollout, stale):
        return real(rollout, stale=False)

    return sampled


def _without_weights(real):
    def forward(self, logps, old_logps, ref_logps, advantages, mask, is_weights=None):
        return real(self, logps, old_logps, ref_logps, advantages, mask)

    return forward


def _no_refresh(real):
    def refresh(self, weights, version):
        return None

    return refresh


def agent_mutants(mutant, wrap) -> dict:
    """The table's entries for the agent features (built with mutants.py's Mutant and _wrap)."""
    return {
        "multi_turn": (
            mutant(
                "environment_tokens_trained",
                "ftune.generation.multi_turn.Trajectories.training_batch",
                wrap(Trajectories, "training_batch", _all_tokens_labelled),
            ),
        ),
        "off_policy_correction": (
            mutant(
                "stale_policy_used_as_current",
                "ftune.training.methods.off_policy_loader.Sampled",
                wrap(off_policy_loader, "Sampled", _never_stale),
            ),
            mutant(
                "importance_correction_dropped",
                "ftune.training.GRPOLoss.forward",
                wrap(training.GRPOLoss, "forward", _without_weights),
            ),
            mutant(
                "worker_never_refreshed",
                "ftune.training.ProcessSampler.refresh",
                wrap(ProcessSampler, "refresh", _no_refresh),
            ),
        ),
    }
