"""A PPO trajectory: sampled responses scored by the reward model, valued, and turned into advantages.

A PPO recipe's ``rollout_on(prompts, epoch)`` samples one response a prompt on the KV cache
(``training.sample_rollout`` with a group of 1), then :func:`ppo_trajectory` makes, as torchtune 0.6.1's
``ppo_full_finetune_single_device`` does in ``generate_trajectory`` and its training loop:

1. the responses cut at their first stop token, ``max_new_tokens`` wide (``ppo_responses``);
2. the sampling policy's and the reference's log-probabilities of the response tokens (at the sampling
   temperature), set to 1 at padding; the value model's estimate at each response position, 0 past
   each row's score index;
3. the reward model's score of each (prompt, response) row at its last real token, replaced by
   ``reward_penalty`` for a penalised response;
4. the per-token rewards (``ppo_rewards``) and the whitened GAE advantages and returns
   (``ppo_advantages``).

Rows are laid out as ftune's rollouts are: prompt then response, right-padded, positions from 0 (no
left padding, so no attention mask): response token ``j`` of row ``i`` is predicted from position
``P_i - 1 + j`` (``P_i`` the prompt's length), where the value of its state is read too (torchtune's
``truncate_sequence_for_logprobs``). :meth:`Trajectory.select` takes rows for PPO's mini-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import nn

from ftune.generation.rollout import Rollout
from ftune.modules.transformer import OutputHead
from ftune.training.methods import ppo_responses as responses_
from ftune.training.methods.logps import target_logps
from ftune.training.methods.ppo_advantages import gae
from ftune.training.methods.ppo_rewards import ppo_rewards
from ftune.training.methods.rollout_batch import Sampling
from ftune.training.step.loss import IGNORE_INDEX
from ftune.training.step.micro_batch import MicroBatch


@dataclass(frozen=True, kw_only=True)
class Trajectory(MicroBatch):
    """PPO rows (prompt + response) and what the loss reads; every tensor's first dimension is the row.

    Attributes (``b`` rows, ``t`` = max_new_tokens):
        positions: ``[b, t]`` the position that predicts each response token (and holds its value).
        responses: ``[b, t]`` the response tokens, padding after the first stop token.
        padding: ``[b, t]`` True after the first stop token.
        value_padding: ``[b, t]`` True where the value loss does not read.
        logps, ref_logps: ``[b, t]`` the sampling policy's and the reference's (1 at padding).
        values: ``[b, t]`` the value model's at sampling (0 at value padding).
        scores: ``[b]`` the reward model's, penalties applied.
        advantages, returns: ``[b, t]``.
        kl, kl_reward: ``[b]`` each row's summed ``log π - log π_ref`` and ``-β·kl``.
        last: ``[b]`` each response's last real index.
        temperature: the temperature log-probabilities are taken at.
    """

    positions: torch.Tensor
    responses: torch.Tensor
    padding: torch.Tensor
    value_padding: torch.Tensor
    logps: torch.Tensor
    ref_logps: torch.Tensor
    values: torch.Tensor
    scores: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    kl: torch.Tensor
    kl_reward: torch.Tensor
    last: torch.Tensor
    temperature: float

    def select(self, rows: torch.Tensor) -> Trajectory:
        """The trajectory of ``rows`` (a ``[n]`` long index), for one PPO micro-batch."""
        picked = {f.name: getattr(self, f.name) for f in fields(self)}
        picked = {
            k: v.index_select(0, rows) if isinstance(v, torch.Tensor) and v.dim() else v
            for k, v in picked.items()
        }
        return replace(self, **picked)

    def state(self) -> dict[str, Any]:
        """Its tensors and numbers (a checkpoint of a trajectory that later steps still train on)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Trajectory:
        return cls(**state)


def response_hidden(hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``[b, t, dim]``: the hidden states at ``positions [b, t]`` of ``hidden [b, s, dim]``."""
    index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])  # (b, t, dim)
    return hidden.gather(1, index)


def response_logps(
    head: OutputHead, hidden: torch.Tensor, batch: Trajectory | _Rows, *, num_chunks: int = 8
) -> torch.Tensor:
    """``[b, t]`` fp32 log-probabilities of the response tokens at ``batch.temperature``, 1 at padding.

    Args:
        head: the policy's (or reference's) output head.
        hidden: its final hidden states ``[b, s, dim]`` of ``batch.tokens``.
        batch: the rows (their positions, responses, padding and temperature).
        num_chunks: blocks the response tokens are projected to the vocabulary in.
    """
    picked = response_hidden(hidden, batch.positions)  # (b, t, dim)
    if batch.temperature != 1.0:
        picked = picked / batch.temperature
    labels = batch.responses.masked_fill(batch.padding, IGNORE_INDEX)
    return target_logps(head, picked, labels, num_chunks=num_chunks).masked_fill(batch.padding, 1.0)


def response_values(value_model: nn.Module, hidden: torch.Tensor, batch: Trajectory | _Rows) -> torch.Tensor:
    """``[b, t]`` fp32: the value model's score head at each response position, 0 at value padding."""
    values = value_model.score(response_hidden(hidden, batch.positions)).squeeze(-1).float()  # (b, t)
    return values.masked_fill(batch.value_padding, 0.0)


@dataclass(frozen=True)
class _Rows:
    """The rows' layout before the log-probabilities are known (what the two helpers above read)."""

    tokens: torch.Tensor
    positions: torch.Tensor
    responses: torch.Tensor
    padding: torch.Tensor
    value_padding: torch.Tensor
    temperature: float

    @property
    def model_inputs(self) -> dict[str, None]:
        """Plain rows: no positions or mask (what ``ReferenceModel.scores`` passes to the forward)."""
        return {"input_pos": None, "mask": None}


def ppo_trajectory(
    rollout: Rollout,
    *,
    policy: nn.Module,
    value_model: nn.Module,
    reward_model: nn.Module,
    reference: Any,
    max_new_tokens: int,
    stop_ids: list[int],
    kl_coeff: float,
    gamma: float,
    lmbda: float,
    penalise_no_eos: bool,
    min_response_length: int | None,
    reward_penalty: float,
    num_chunks: int = 8,
) -> Trajectory:
    """The PPO micro-batch of one prompt batch's responses (the module docstring's steps 1 to 4).

    Args:
        rollout: one response a prompt (``sample_rollout`` with group size 1).
        policy: the policy that sampled (its log-probabilities are the ratio's denominator).
        value_model: the value model (a decoder with a score head, read at every position).
        reward_model: the frozen reward model (a score head, read at each row's last real token).
        reference: the frozen reference (``training.ReferenceModel``).
        max_new_tokens, stop_ids: the rollout's width and the tokens that end a response.
        kl_coeff: β of the KL penalty (the controller's current value when adaptive).
        gamma, lmbda: GAE's γ and λ.
        penalise_no_eos, min_response_length, reward_penalty: see ``ppo_responses.penalised``.
        num_chunks: blocks the response tokens are projected to the vocabulary in.
    """
    device = rollout.completion_ids.device
    b, t, pad = rollout.completion_ids.shape[0], max_new_tokens, rollout.pad_id
    sampled = torch.full((b, t), pad, dtype=torch.long, device=device)
    sampled[:, : rollout.completion_ids.shape[1]] = rollout.completion_ids
    padding, responses = responses_.truncate_at_first_stop(sampled, stop_ids, pad)
    last = responses_.last_index(padding)
    score_at = responses_.score_index(last, t)
    prompt_lengths = torch.tensor([len(p) for p in rollout.prompt_ids], device=device)
    tokens = torch.full((b, int(prompt_lengths.max()) + t), pad, dtype=torch.long, device=device)
    for i, prompt in enumerate(rollout.prompt_ids):
        tokens[i, : len(prompt)] = torch.tensor(prompt, device=device)
        tokens[i, len(prompt) : len(prompt) + t] = responses[i]
    rows = _Rows(
        tokens=tokens,
        positions=prompt_lengths[:, None] - 1 + torch.arange(t, device=device),  # (b, t)
        responses=responses,
        padding=padding,
        value_padding=responses_.value_padding(padding, score_at),
        temperature=rollout.logp_temperature,
    )
    with torch.no_grad():
        logps = response_logps(policy.head, policy.hidden(tokens), rows, num_chunks=num_chunks)
        ref_logps = reference.scores(
            rows, lambda head, hidden: response_logps(head, hidden, rows, num_chunks=num_chunks)
        )
        values = response_values(value_model, value_model.hidden(tokens), rows)
        reward_hidden = reward_model.hidden(tokens)  # (b, s, dim)
        at_last = (prompt_lengths + last).unsqueeze(-1)  # (b, 1): the last real response token
        scores = (
            reward_model.score(response_hidden(reward_hidden, at_last)).squeeze(-1).squeeze(-1).float()
        )  # (b,)
    penalised = responses_.penalised(
        padding, last, penalise_no_eos=penalise_no_eos, min_response_length=min_response_length
    )
    scores = scores.masked_fill(penalised, reward_penalty)
    rewards = ppo_rewards(scores, logps, ref_logps, kl_coeff, score_at)
    advantages, returns = gae(values, rewards.total, gamma=gamma, lmbda=lmbda, mask=~padding)
    labels = torch.full_like(
        tokens, IGNORE_INDEX
    )  # shifted: each real response token at its predicting position
    labels.scatter_(1, rows.positions, responses.masked_fill(padding, IGNORE_INDEX))
    return Trajectory(
        tokens,
        labels,  # what the step counts as trained tokens; the loss reads `responses`
        None,
        None,
        positions=rows.positions,
        responses=responses,
        padding=padding,
        value_padding=rows.value_padding,
        logps=logps,
        ref_logps=ref_logps,
        values=values,
        scores=scores,
        advantages=advantages,
        returns=returns,
        kl=rewards.kl.sum(1),
        kl_reward=rewards.kl_reward.sum(1),
        last=last,
        temperature=rows.temperature,
    )


def ppo_sampling(settings: Any, tokenizer: Any) -> Sampling:
    """How a PPO rollout samples: one response a prompt, ``max_generated_tokens`` long, at ``temperature``
    with ``top_k``, ending at ``stop_token_ids`` (the tokenizer's stop tokens when null)."""
    stops = settings.stop_token_ids if settings.stop_token_ids is not None else tokenizer.stop_tokens
    return Sampling(
        group_size=1,
        max_new_tokens=settings.max_generated_tokens,
        temperature=float(settings.temperature),
        top_k=settings.top_k,
        top_p=None,
        stop_ids=tuple(stops),
        pad_id=tokenizer.pad_id,
        seed=settings.seed,
    )
