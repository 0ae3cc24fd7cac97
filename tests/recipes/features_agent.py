"""The feature checks of the agent recipe: multi-turn conversations (only the model's tokens trained) and
rollouts beside training (bounded staleness, truncated importance weights). Part of
tests/recipes/features.py's CHECKS; same contract (each asserts the effect; tests/recipes/mutants_agent.py
holds the mutants that must fail them)."""

from __future__ import annotations

import dataclasses

import pytest

from ftune import training
from ftune.generation.multi_turn import Trajectories
from ftune.training.methods.rollout_worker import ProcessSampler

# Updates large enough for the policy to move in a step: a stale sampler's tokens then have other
# log-probabilities under the current policy.
MOVE = ("optimizer.lr=0.02", "lr_scheduler.num_warmup_steps=0", "batch_size=2", "loss.beta=0")


def multi_turn(run, tmp_path):
    """Conversations go past their first turn with the environment's messages between the model's turns;
    those tokens are in the rows (context) but labelled -100 (never trained), the model's labelled."""
    made = []
    with pytest.MonkeyPatch.context() as mp:
        real = Trajectories.training_batch

        def spy(self):
            made.append((self, real(self)))
            return made[-1][1]

        mp.setattr(Trajectories, "training_batch", spy)
        run("max_steps=1", output_dir=tmp_path)
    environment_tokens = 0
    for trajectories, batch in made:
        for i, row in enumerate(trajectories.rows):
            start = len(row.prompt)
            labels = batch["labels"][i, start : start + len(row.tokens)].tolist()
            assert labels == [t if s else -100 for t, s in zip(row.tokens, row.sampled)], (
                f"row {i}: the labels after the prompt are not the model's tokens with the environment's -100"
            )
            environment_tokens += row.sampled.count(False)
    assert environment_tokens > 0, "no conversation went past its first turn: no environment token to check"


def off_policy_correction(run, tmp_path):
    """max_off_policy_steps=1: step t trains on what the policy after step t - 2 sampled (versions 0, 0, 1),
    stale from step 2 on, with truncated importance weights that change the loss."""
    versions, losses = [], []
    with pytest.MonkeyPatch.context() as mp:
        real_result, real_loss = ProcessSampler.result, training.grpo_loss

        def grpo_loss(loss_fn, model, hidden, batch):
            out = real_loss(loss_fn, model, hidden, batch)
            plain = None
            if batch.is_weights is not None:
                plain = real_loss(
                    loss_fn, model, hidden, dataclasses.replace(batch, is_weights=None)
                ).sum.item()
            losses.append((out.sum.item(), plain))
            return out

        mp.setattr(ProcessSampler, "result", _recording(real_result, versions))
        mp.setattr(training, "grpo_loss", grpo_loss)
        logs, _ = run("max_steps=3", "max_off_policy_steps=1", *MOVE, output_dir=tmp_path)
    # (a fourth batch, step 4's, was sampled ahead by the policy after step 2: the final save waits for it)
    assert versions[:3] == [0, 0, 1], (
        f"weights versions that sampled steps 1-3: {versions[:3]} (expected 0, 0, 1)"
    )
    stale = [plain is not None for _, plain in losses]
    assert stale == [False, True, True], f"micro-batches finished as stale rollouts: {stale}"
    assert all(out != plain for out, plain in losses[1:]), (
        f"the importance weights left the loss as it was: {losses}"
    )


def _recording(real_result, versions):
    def result(self):
        version, rollout = real_result(self)
        versions.append(version)
        return version, rollout

    return result
