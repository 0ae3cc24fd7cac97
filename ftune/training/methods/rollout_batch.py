"""One GRPO micro-batch: sample G completions of each prompt, score them, and make what the loss reads.

A GRPO recipe's ``rollout_on(prompts, epoch)`` calls, in order, :func:`sample_rollout` (the
policy's completions on the KV cache, in eval mode, each prompt's rows seeded by the run's seed,
the epoch and the prompt's dataset index, so that a completion does not depend on the batch or the
rank it is sampled on), :func:`score_rollout` (the rewards) and :func:`rollout_batch`
(group-relative advantages, the old and the reference log-probabilities): a :class:`RolloutBatch`,
the micro-batch its ``loss_on`` hands to ``training.grpo_loss``.

Every log-probability is taken at the sampling temperature (TRL's convention, see
``ftune.generation.rollout``): logits / T, which is ``(hidden / T) @ W``, so the hidden states are
divided before the chunked projection and no logits tensor is ever scaled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from ftune.data.prompt_batch import PromptBatch
from ftune.generation.multi_turn import STOPS, Trajectories
from ftune.generation.rollout import Rollout, rollout
from ftune.rewards import RewardSet
from ftune.training.features.context_parallel import whole_sequences
from ftune.training.methods.grpo_rewards import group_advantages, reward_metrics
from ftune.training.methods.off_policy import importance_weights, shift_logps
from ftune.training.methods.rollout_packing import pack_rows
from ftune.training.step.loss import IGNORE_INDEX
from ftune.training.step.metric import Metric
from ftune.training.step.micro_batch import MicroBatch, on_device


@dataclass(frozen=True)
class Sampling:
    """How a rollout samples: G completions per prompt, their length, temperature and filters, stops."""

    group_size: int
    max_new_tokens: int
    temperature: float
    top_k: int | None
    top_p: float | None
    stop_ids: tuple[int, ...]
    pad_id: int
    seed: int
    stop_strings: tuple[str, ...] = ()
    decode: Callable[[list[int]], str] | None = None  # the tokenizer's, for stop_strings

    @classmethod
    def of(cls, settings: Any, tokenizer: Any) -> Sampling:
        """From a GRPO recipe's settings and its tokenizer (whose ``stop_tokens`` end a completion)."""
        return cls(
            group_size=settings.group_size,
            max_new_tokens=settings.max_new_tokens,
            temperature=float(settings.temperature),
            top_k=settings.top_k,
            top_p=settings.top_p,
            stop_ids=tuple(tokenizer.stop_tokens),
            pad_id=tokenizer.pad_id,
            seed=settings.seed,
            stop_strings=tuple(settings.stop_strings),
            decode=partial(
                tokenizer.decode, skip_special_tokens=True
            ),  # picklable: a worker process samples too
        )

    def stop_when(self) -> Callable[[int, list[int]], bool] | None:
        """Ends a row whose completion's text contains a stop string (None when there is none).

        A row ends at the first token that completes one, so the text is checked as a whole: no
        earlier text of the row held a stop string."""
        if not self.stop_strings or self.decode is None:
            return None
        stops, decode = self.stop_strings, self.decode

        def ends(row: int, tokens: list[int]) -> bool:
            text = decode(tokens)
            return any(stop in text for stop in stops)

        return ends


def row_generators(
    seed: int, epoch: int, indices: Sequence[int], group_size: int, device: torch.device
) -> list[torch.Generator]:
    """One generator per completion row, seeded by (run seed, epoch, prompt index, g)."""
    gens = []
    for index in indices:
        for g in range(group_size):
            state = np.random.SeedSequence([seed, epoch, index, g]).generate_state(2, np.uint32)
            gens.append(torch.Generator(device=device).manual_seed(int(state[0]) << 32 | int(state[1])))
    return gens


@contextmanager
def sampling_mode(model: nn.Module) -> Iterator[None]:
    """How a rollout samples: eval mode, no gradients, sharded weights gathered, whole sequences (a
    context-parallel split lifted: decoding runs on the KV cache); the mode put back after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), gathered(model), whole_sequences(model):
            yield
    finally:
        model.train(was_training)


@contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """An FSDP2-sharded model's weights gathered for the whole rollout (nothing for a plain model).

    Decoding runs one forward per token, and rows stop at different steps: ranks would run different
    numbers of forwards, and the all-gathers of a sharded forward would wait forever. Gathered once,
    the forwards run no collective, as TRL does with ZeRO-3 (``ds3_gather_for_generation``).
    """
    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not modules:
        yield
        return
    # Whether each module frees its gathered weights after forward (FSDP2 keeps no public getter); a
    # unit whose parameters all sit in units of their own (beside tensor parallel) has no group.
    groups = [m._get_fsdp_state()._fsdp_param_group for m in modules]  # noqa: SLF001
    reshards = [g is not None and g.post_forward_mesh_info is not None for g in groups]
    for m in modules:
        m.unshard()
        m.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for m, reshard in zip(modules, reshards):
            m.set_reshard_after_forward(reshard, recurse=False)
            m.reshard()


def sample_rollout(model: nn.Module, prompts: PromptBatch, sampling: Sampling, *, epoch: int) -> Rollout:
    """``sampling.group_size`` completions of each prompt, sampled in one batch in eval mode (no dropout).

    Args:
        model: the policy (an ftune decoder).
        prompts: the micro-batch's prompts.
        sampling: see :class:`Sampling`.
        epoch: the epoch the prompts are drawn in (it seeds the draws with the prompts' indices).
    """
    device = next(model.parameters()).device
    gens = row_generators(sampling.seed, epoch, prompts.indices, sampling.group_size, device)
    with sampling_mode(model):
        return rollout(
            model,
            prompts.tokens,
            group_size=sampling.group_size,
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            stop_ids=list(sampling.stop_ids),
            pad_id=sampling.pad_id,
            generator=gens,
            stop_when=sampling.stop_when(),
            pixel_values=prompts.pixel_values,  # an image-text model's prompts' images (None: text)
            image_sample=prompts.image_sample,
        )


@dataclass(frozen=True)
class Scores:
    """The rewards of a rollout's completions (N = prompts x G, in row order)."""

    total: list[float]
    per_reward: dict[str, list[float]]
    completions: list[str]


def score_rollout(rewards: RewardSet, tokenizer: Any, prompts: PromptBatch, rollout: Rollout) -> Scores:
    """Decode each completion (its stop token dropped) and score it with every reward.

    Raises:
        ftune.rewards.RewardError: a reward raised or returned a non-number (named, with the sample).
    """
    stops, g = set(tokenizer.stop_tokens), rollout.group_size
    texts = []
    for ids in rollout.completions():
        texts.append(
            tokenizer.decode(ids[:-1] if ids and ids[-1] in stops else ids, skip_special_tokens=True)
        )
    rows = range(len(texts))
    total, per = rewards(
        [prompts.prompts[i // g] for i in rows], texts, [prompts.samples[i // g] for i in rows]
    )
    return Scores(total, per, texts)


@dataclass(frozen=True, kw_only=True)
class RolloutBatch(MicroBatch):
    """A GRPO micro-batch: prompt + completion rows (only completion tokens labelled) and what the loss reads.

    Attributes:
        advantages: ``[b]`` fp32, each completion's group-relative advantage.
        old_logps: ``[b, s]`` the sampling policy's log-probabilities at the labels' positions (a
            forward on this batch right after sampling), or None: each rollout serves one step, so
            the loss takes the current ones, detached (ratio 1).
        ref_logps: ``[b, s]`` the reference's, or None when the loss has no KL term.
        temperature: the temperature log-probabilities are taken at.
        metrics: figures logged with the step, each with its own count (rewards, completion lengths).
        is_weights: ``[b, s]`` the truncated importance weights of a rollout sampled by an older
            policy (``training.GRPOLoss``'s module docstring), or None: sampled by the current one.
    """

    advantages: torch.Tensor
    old_logps: torch.Tensor | None
    ref_logps: torch.Tensor | None
    temperature: float
    metrics: dict[str, Metric]
    is_weights: torch.Tensor | None = None

    def state(self) -> dict[str, Any]:
        """Plain tensors and numbers (a checkpoint of a rollout that later steps reuse)."""
        return {
            "device": str(self.tokens.device),
            "tokens": self.tokens,
            "labels": self.labels,
            "input_pos": self.input_pos,
            "document_ids": self.document_ids,
            "advantages": self.advantages,
            "old_logps": self.old_logps,
            "ref_logps": self.ref_logps,
            "temperature": self.temperature,
            "metrics": {k: vars(m) for k, m in self.metrics.items()},
            "is_weights": self.is_weights,
            "pixel_values": self.pixel_values,
            "image_sample": self.image_sample,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RolloutBatch:
        """The batch `state()` saved, on the device it was made on."""
        device = torch.device(state["device"])

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return cls(
            move(state["tokens"]),
            move(state["labels"]),
            move(state.get("input_pos")),  # a packed rollout's (padding_free); None before they were saved
            move(state.get("document_ids")),
            advantages=move(state["advantages"]),
            old_logps=move(state["old_logps"]),
            ref_logps=move(state["ref_logps"]),
            temperature=float(state["temperature"]),
            # A rollout saved before metrics carried their own counts logs nothing more (figures only).
            metrics={k: _metric(m, move) for k, m in state["metrics"].items() if isinstance(m, dict)},
            is_weights=move(state.get("is_weights")),  # a rollout saved before off-policy correction: None
            pixel_values=move(state.get("pixel_values")),  # images: the rows' own (None: text)
            image_sample=move(state.get("image_sample")),
        )


def _metric(state: dict[str, Any], move: Callable[[torch.Tensor | None], torch.Tensor | None]) -> Metric:
    return Metric(state["kind"], move(state["total"]), move(state["count"]), move(state["squares"]))


def _policy_logps(policy: nn.Module, loss_fn: Any, batch: MicroBatch, temperature: float) -> torch.Tensor:
    with torch.no_grad():
        hidden = policy.hidden(batch.tokens, **batch.model_inputs)  # packed positions and mask, or images
        return loss_fn.token_logps(policy.head, hidden / temperature, batch.labels)


def _trajectory_metrics(rollout: Trajectories, device: torch.device) -> dict[str, Metric]:
    """A multi-turn rollout's figures: turns, model tokens and the share of each stop reason."""
    rows = rollout.rows

    def mean(values: list[float]) -> Metric:
        return Metric.mean(torch.tensor(values, dtype=torch.float32, device=device))

    out = {"trajectories/turns": mean([r.turns for r in rows])}
    out["trajectories/model_tokens"] = mean([sum(r.sampled) for r in rows])
    out.update({f"trajectories/stop/{s}": mean([float(r.stop == s) for r in rows]) for s in STOPS})
    return out


def rollout_batch(
    rollout: Rollout | Trajectories,
    scores: Scores,
    loss_fn: Any,
    *,
    policy: nn.Module,
    reference: Any,
    device: torch.device,
    scale_rewards: bool,
    keep_old_logps: bool,
    importance_cap: float | None = None,
    padding_free: bool = False,
) -> RolloutBatch:
    """The micro-batch a GRPO ``loss_on`` reads: advantages, old and reference log-probabilities, sums to log.

    Args:
        rollout, scores: from :func:`sample_rollout` and :func:`score_rollout` (or a multi-turn
            rollout's, ``training.sample_trajectories`` and ``score_trajectories``: its trajectories'
            figures are logged too).
        loss_fn: the recipe's :class:`ftune.training.GRPOLoss` (it projects in chunks).
        policy: the policy, for the old log-probabilities when ``keep_old_logps``.
        reference: a ``ftune.training.ReferenceModel`` (run only when the loss has a KL term).
        device: where the model lives.
        scale_rewards: divide advantages by the group's std (False: Dr. GRPO).
        keep_old_logps: the rollout serves several steps (``num_iterations > 1``): keep the
            sampling policy's log-probabilities for the clipped ratio.
        importance_cap: set when an older policy sampled the rollout (rollouts beside training): the
            current policy's log-probabilities are kept as the old ones and each token is weighted by
            ``min(exp(old - sampled), importance_cap)`` (``ftune.training.methods.off_policy``).
        padding_free: lay the rows end to end in one row (``ftune.training.methods.rollout_packing``):
            the forwards compute no padding; ``grpo_loss`` maps the packed row back to rows.
    """
    if not callable(getattr(loss_fn, "token_logps", None)) or not hasattr(loss_fn, "needs_reference"):
        raise ValueError(
            "loss: the GRPO recipes need loss._component_=ftune.training.GRPOLoss; got "
            f"{type(loss_fn).__module__}.{type(loss_fn).__name__}."
        )
    parts = rollout.training_batch()
    if padding_free:
        parts = pack_rows(parts)  # one row, with input_pos and document_ids (images are refused)
    batch = on_device({k: v for k, v in parts.items() if k != "old_logps"}, device)  # images too
    total = torch.tensor(scores.total, dtype=torch.float32, device=device)
    g = rollout.group_size
    advantages = group_advantages(total, g, scale_rewards=scale_rewards)
    temperature = rollout.logp_temperature
    stale = importance_cap is not None
    old = _policy_logps(policy, loss_fn, batch, temperature) if keep_old_logps or stale else None
    ref = reference.token_logps(loss_fn, batch, temperature)
    per_reward = {
        k: torch.tensor(v, dtype=torch.float32, device=device) for k, v in scores.per_reward.items()
    }
    lengths = rollout.lengths.float().to(device)
    metrics = {
        **reward_metrics(total, per_reward, g),
        "completions/mean_length": Metric.mean(lengths),
        "completions/max_length": Metric.max(lengths),
        "completions/clipped_ratio": Metric.mean((~rollout.finished).float().to(device)),
    }
    if isinstance(rollout, Trajectories):
        metrics.update(_trajectory_metrics(rollout, device))
    weights = None
    if stale:
        sampled = shift_logps(parts["old_logps"].to(device))  # aligned with the shifted labels
        trained = batch.labels != IGNORE_INDEX
        weights = importance_weights(old, sampled, trained, cap=importance_cap)
        metrics["sampling/importance_weight/mean"] = Metric.mean(weights[trained])
        metrics["sampling/importance_weight/max"] = Metric.max(weights[trained])
    return RolloutBatch(
        batch.tokens,
        batch.labels,
        batch.input_pos,
        batch.document_ids,
        advantages=advantages,
        old_logps=old,
        ref_logps=ref,
        temperature=temperature,
        metrics=metrics,
        is_weights=weights,
        pixel_values=batch.pixel_values,
        image_sample=batch.image_sample,
    )
