"""GRPO's policy loss: group-relative advantages, a clipped policy ratio and a KL penalty to a reference.

For each prompt, G completions are sampled and scored; a completion's advantage A comes from its
group's rewards (``ftune.training.methods.grpo_rewards``). Per completion token, with ``r = exp(log π -
log π_old)``::

    loss_tok = -min(r·A, clip(r, 1 - ε_low, 1 + ε_high)·A) + β·kl_tok
    k3       = exp(log π_ref - log π) - (log π_ref - log π) - 1        (Schulman's k3, ≥ 0)
    kl_tok   = k3 (kl_estimator "k3", the published GRPO term)  or  r·k3 ("k3_ratio": TRL 1.16's
               default use_bias_correction_kl=True, the ratio not detached: the reverse KL's gradient)

and the aggregation over a step's completion tokens (``loss_type``), as TRL 1.16's GRPOTrainer:

- ``grpo``: each sequence's token mean, averaged over the sequences;
- ``dapo``: the token sum over the step divided by the step's completion tokens;
- ``dr_grpo``: the token sum divided by sequences × ``max_completion_length`` (a constant).

A rollout sampled by an older policy than the one the step starts from (generation beside training,
``max_off_policy_steps`` > 0) carries truncated importance weights ``w = min(exp(log π_old - log
π_sampler), C)`` per token, TRL 1.16's ``vllm_importance_sampling_correction`` (``token_truncate``):
they multiply the policy term, ``loss_tok = -w·min(r·A, clip(r)·A) + β·kl_tok``, where ``π_old`` is
the policy at the start of the step (the clipped ratio's denominator) and ``π_sampler`` the one that
drew the tokens.

ftune normalises a step by a count known before backward (``StepLoss(per=...)``), so the loss of
a micro-batch is a SUM, and :meth:`GRPOLoss.per` its count: sequence means and sequences (grpo),
token sum and tokens (dapo), token sum and sequences × max_completion_length (dr_grpo). Summed
over micro-batches and ranks, sum / count is TRL's loss of the step (for grpo and dr_grpo TRL
averages per-micro-batch means, which is the same with equal micro-batches, as GRPO's are; for
dapo it is TRL's with ``steps_per_generation == gradient_accumulation_steps``, its default).

Log-probabilities come from final hidden states through the model's head (:meth:`GRPOLoss.token_logps`),
in blocks of tokens: neither the forward nor the saved state for backward ever holds more than one
block's fp32 logits (backward recomputes each block's projection). A recipe's ``loss_on`` calls
:func:`grpo_loss`, which adds a mixture-of-experts policy's balancing loss of its own forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ftune.modules.transformer import OutputHead
from ftune.settings.grpo import loss_problems
from ftune.training.methods.logps import target_logps
from ftune.training.methods.rollout_batch import RolloutBatch
from ftune.training.methods.rollout_packing import rows_of
from ftune.training.step.aux_loss import with_aux_loss
from ftune.training.step.loss import IGNORE_INDEX
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import MicroBatch

#: The per-token KL terms: Schulman's k3, and k3 times the policy ratio (TRL's bias-corrected KL).
KL_ESTIMATORS = ("k3", "k3_ratio")


@dataclass(frozen=True)
class GRPOLosses:
    """A micro-batch's GRPO loss and the token sums it logs.

    Attributes:
        sum: the loss summed the way ``loss_type`` aggregates (sequence means for grpo, token
            sums otherwise), a scalar with a graph; divide by the step's :meth:`GRPOLoss.per` total.
        tokens: completion tokens of the micro-batch.
        kl: the token sum of ``kl_tok`` (k3, or r·k3 for ``"k3_ratio"``; 0 when beta is 0: not computed).
        clipped_low: tokens whose ratio fell below 1 - ε_low with A < 0 (the clip is active).
        clipped_high: tokens whose ratio rose above 1 + ε_high with A > 0.
    """

    sum: torch.Tensor
    tokens: torch.Tensor
    kl: torch.Tensor
    clipped_low: torch.Tensor
    clipped_high: torch.Tensor

    def metrics(self) -> dict[str, Metric]:
        """The figures logged with the loss, each a mean over the completion tokens (TRL's global token means)."""
        region = self.clipped_low + self.clipped_high
        figures = {"clip_ratio/low": self.clipped_low, "clip_ratio/high": self.clipped_high}
        figures.update({"clip_ratio/region": region, "kl": self.kl})
        return {name: Metric.ratio(value, self.tokens) for name, value in figures.items()}


def per_sequence(batch: MicroBatch) -> torch.Tensor:
    """A step normaliser: the batch's sequences (rows; a packed batch's documents, numbered 0, 1, ...)."""
    if batch.document_ids is not None:
        return (batch.document_ids[:, -1] + 1).sum()
    return torch.tensor(batch.rows, device=batch.tokens.device)


class GRPOLoss(nn.Module):
    """GRPO's clipped policy loss with a KL penalty, aggregated as ``grpo``, ``dapo`` or ``dr_grpo``.

    Args:
        loss_type: "grpo" (per-sequence mean), "dapo" (token mean over the step) or "dr_grpo"
            (token sum over sequences × max_completion_length).
        epsilon: ε_low, the ratio's lower clip is 1 - ε_low; in (0, 1) (TRL uses 0.2).
        epsilon_high: ε_high, the upper clip is 1 + ε_high (> 0; DAPO's clip-higher uses 0.28);
            None means the same as ``epsilon`` (a symmetric clip).
        beta: the KL coefficient (>= 0); 0 drops the KL term and the reference pass.
        max_completion_length: Dr. GRPO's constant, the rollout's maximum new tokens; required for
            "dr_grpo", None for the others.
        num_chunks: blocks the completion tokens are projected to the vocabulary in.
        kl_estimator: "k3" (the default: the published GRPO term) or "k3_ratio" (k3 times the
            policy ratio: TRL 1.16's default, ``use_bias_correction_kl=True``); unused when beta is 0.

    Raises:
        ValueError: for an unknown loss_type or kl_estimator or an out-of-range or mismatched argument.
    """

    def __init__(
        self,
        loss_type: Literal["grpo", "dapo", "dr_grpo"],
        *,
        epsilon: float,
        epsilon_high: float | None,
        beta: float,
        max_completion_length: int | None,
        num_chunks: int = 8,
        kl_estimator: Literal["k3", "k3_ratio"] = "k3",
    ) -> None:
        super().__init__()
        arguments = dict(loss_type=loss_type, epsilon=epsilon, epsilon_high=epsilon_high, beta=beta)
        arguments.update(max_completion_length=max_completion_length, num_chunks=num_chunks)
        # the checks `ftune run` makes before torch (ftune.settings.grpo)
        if problems := loss_problems(arguments):
            raise ValueError(f"GRPOLoss: {problems[0][1]}")
        self.loss_type, self.beta, self.num_chunks = loss_type, float(beta), num_chunks
        self.epsilon_low = float(epsilon)
        self.epsilon_high = float(epsilon if epsilon_high is None else epsilon_high)
        self.max_completion_length = max_completion_length
        if kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"GRPOLoss: kl_estimator must be one of {list(KL_ESTIMATORS)}, got {kl_estimator!r}; set loss."
                "kl_estimator=k3 (the published GRPO term) or k3_ratio (TRL's use_bias_correction_kl=True)."
            )
        self.kl_estimator = kl_estimator

    @property
    def needs_reference(self) -> bool:
        """False when beta is 0: there is no KL term, so no reference model is run."""
        return self.beta != 0.0

    def per(self, batch: MicroBatch) -> torch.Tensor:
        """The step normaliser of this aggregation (``StepLoss(per=loss.per)``).

        ``batch.labels`` must be -100 everywhere but at completion tokens: dapo counts them.
        """
        if self.loss_type == "dapo":
            return (batch.labels != IGNORE_INDEX).sum()
        if self.loss_type == "grpo":
            return per_sequence(batch)
        return per_sequence(batch) * self.max_completion_length

    def token_logps(self, head: OutputHead, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Per-token ``log p(label)`` ``[b, t]`` through the model's head, in ``num_chunks`` blocks
        (:func:`ftune.training.methods.logps.target_logps`)."""
        return target_logps(head, hidden, labels, num_chunks=self.num_chunks)

    def _check(self, logps, old_logps, ref_logps, advantages, mask) -> None:
        if (ref_logps is None) == self.needs_reference:
            raise ValueError(
                f"GRPOLoss(beta={self.beta}): "
                + (
                    "the KL term needs the reference model's log-probabilities; pass ref_logps."
                    if self.needs_reference
                    else "beta is 0 so no reference is used; pass ref_logps=None (skip the reference pass)."
                )
            )
        shapes = {"old_logps": old_logps, "ref_logps": ref_logps, "mask": mask}
        wrong = {k: list(v.shape) for k, v in shapes.items() if v is not None and v.shape != logps.shape}
        if logps.dim() != 2 or wrong or advantages.shape != logps.shape[:1]:
            raise ValueError(
                f"GRPOLoss: expected logps, old_logps, ref_logps and mask [b, t] and advantages [b]; got logps "
                f"{list(logps.shape)}, advantages {list(advantages.shape)}, mismatched {wrong}."
            )
        if self.loss_type == "dr_grpo" and logps.shape[1] > self.max_completion_length:
            longest = int(mask.sum(-1).max())
            if longest > self.max_completion_length:
                raise ValueError(
                    f"GRPOLoss('dr_grpo'): a completion has {longest} tokens, more than max_completion_length="
                    f"{self.max_completion_length}; set it to the rollout's max new tokens."
                )

    def forward(
        self,
        logps: torch.Tensor,
        old_logps: torch.Tensor,
        ref_logps: torch.Tensor | None,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        is_weights: torch.Tensor | None = None,
    ) -> GRPOLosses:
        """The micro-batch's loss sum, count and logged token sums.

        Args:
            logps: the policy's log-probabilities of the completion tokens ``[b, t]`` (with a graph).
            old_logps: those of the policy that sampled them ``[b, t]`` (the rollout's; pass
                ``logps.detach()`` when each rollout batch serves one optimizer step: ratio 1).
            ref_logps: the reference model's ``[b, t]``; None exactly when beta is 0.
            advantages: ``[b]``, from ``group_advantages``.
            mask: ``[b, t]``, 1 (or True) at completion tokens, 0 at padding.
            is_weights: ``[b, t]`` truncated importance weights of a stale rollout (see the module
                docstring), detached; None: the rollout's sampler is the policy at the step's start.

        Returns:
            :class:`GRPOLosses`.

        Raises:
            ValueError: if the shapes disagree or the reference is missing or not expected.
        """
        self._check(logps, old_logps, ref_logps, advantages, mask)
        mask = mask.to(logps.dtype)
        ratio = torch.exp(logps - old_logps)
        clipped = torch.clamp(ratio, 1 - self.epsilon_low, 1 + self.epsilon_high)
        adv = advantages.to(logps.dtype)[:, None]
        per_token = -torch.min(ratio * adv, clipped * adv)
        if is_weights is not None:
            per_token = per_token * is_weights.to(per_token.dtype)
        kl_sum = logps.new_zeros(())
        if self.needs_reference:
            delta = ref_logps - logps
            kl = torch.exp(delta) - delta - 1
            if self.kl_estimator == "k3_ratio":
                kl = kl * ratio  # the ratio not detached: it changes the gradient even where it is 1
            per_token = per_token + self.beta * kl
            kl_sum = (kl * mask).sum().detach()
        masked = per_token * mask
        tokens = mask.sum()
        if self.loss_type == "grpo":
            loss_sum = (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum()
        else:
            loss_sum = masked.sum()
        with torch.no_grad():
            low = ((ratio < 1 - self.epsilon_low) & (adv < 0)).to(mask.dtype)
            high = ((ratio > 1 + self.epsilon_high) & (adv > 0)).to(mask.dtype)
            return GRPOLosses(loss_sum, tokens, kl_sum, (low * mask).sum(), (high * mask).sum())


def grpo_loss(loss_fn: GRPOLoss, model: nn.Module, hidden: torch.Tensor, batch: MicroBatch) -> Loss:
    """A rollout micro-batch's GRPO loss sum, its count (:meth:`GRPOLoss.per`), and the figures logged with it.

    Args:
        loss_fn: the recipe's :class:`GRPOLoss`.
        model: the policy whose ``hidden`` these are (its output head, and its router logits).
        hidden: the policy's final hidden states ``[b, s, dim]`` of ``batch`` (``[1, n, dim]``: packed).
        batch: a :class:`ftune.training.RolloutBatch` (``rollout_on``'s).

    Raises:
        ValueError: ``batch`` is not a RolloutBatch (a GRPO loader makes them).
    """
    if not isinstance(batch, RolloutBatch):
        raise ValueError(
            f"grpo_loss: got a {type(batch).__name__}; a GRPO recipe's batches come from "
            "training.RolloutLoader (prompts in, scored rollouts out)."
        )
    scaled = hidden if batch.temperature == 1.0 else hidden / batch.temperature
    logps = loss_fn.token_logps(model.head, scaled, batch.labels)  # (b, s), 0 off the completions
    old = batch.old_logps if batch.old_logps is not None else logps.detach()
    labels, ref, weights = batch.labels, batch.ref_logps, batch.is_weights
    if batch.document_ids is not None:  # packed (padding_free): each completion back at its own row
        logps, old, ref, weights, labels = rows_of(batch, logps, old, ref, weights, labels)
    mask = labels != IGNORE_INDEX
    stale = {} if weights is None else {"is_weights": weights}  # a stale rollout's weights
    losses = loss_fn(logps, old, ref, batch.advantages, mask, **stale)
    loss = Loss(losses.sum, int(loss_fn.per(batch)), {**losses.metrics(), **batch.metrics})
    return with_aux_loss(model, batch, loss)
