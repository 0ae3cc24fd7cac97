"""Preference losses on the log-probabilities of chosen and rejected answers: DPO, RSO, IPO, SimPO, ORPO.

One component, five ``loss_type`` values (a pair's chosen answer c and rejected answer r; log π
is the policy's summed log-probability of an answer's labelled tokens, log π_ref the reference
model's, n its number of labelled tokens):

- ``sigmoid`` (DPO, Rafailov et al. 2023): with ``h = (log π(c) - log π_ref(c)) - (log π(r) - log π_ref(r))``,
  loss = ``-(1 - ε)·log σ(β·h) - ε·log σ(-β·h)`` (``ε = label_smoothing``, 0 for plain DPO);
- ``hinge`` (RSO, Liu et al. 2023; SLiC's hinge on DPO's log-ratios): the same ``h``,
  loss = ``max(0, 1 - β·h)``: a pair stops contributing once its margin ``β·h`` reaches 1;
- ``ipo`` (Azar et al. 2023), length-normalised as TRL does:
  ``h = (log π(c) - log π_ref(c)) / n_c - (log π(r) - log π_ref(r)) / n_r``, loss = ``(h - 1 / (2β))²``;
- ``simpo`` (Meng et al. 2024), reference-free: ``h = β·(log π(c) / n_c - log π(r) / n_r) - γ``,
  loss = ``-(1 - ε)·log σ(h) - ε·log σ(-h)``;
- ``orpo`` (Hong et al. 2024), reference-free: with the mean log-probability ``a = log π / n`` of
  each answer, the log odds ratio ``h = (a_c - a_r) - (log(1 - e^a_c) - log(1 - e^a_r))``, the odds
  term is ``-β·log σ(h)``; ORPO's supervised term (the chosen rows' token cross-entropy) is added by
  ``ftune.training.preference_loss``, which has the hidden states it needs.

Rewards (logged, not trained on): ``β·(log π - log π_ref)`` of each answer for sigmoid, hinge and IPO,
``β·log π / n`` for SimPO and ORPO. The loss is per pair: the training step averages it over the pairs of
the step (``StepLoss(per=ftune.training.per_pair)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.transformer import OutputHead
from ftune.training.methods.logps import sequence_logps, token_logps
from ftune.training.step.loss import IGNORE_INDEX
from ftune.training.step.metric import Metric

LOSS_TYPES = ("sigmoid", "hinge", "ipo", "simpo", "orpo")
# Reference-free loss types: no reference model is run.
REFERENCE_FREE = ("simpo", "orpo")


@dataclass(frozen=True)
class PairLogps:
    """Summed log-probabilities of the labelled tokens of each pair's answers, and their token counts.

    Attributes:
        chosen, rejected: ``[pairs]`` fp32.
        chosen_tokens, rejected_tokens: ``[pairs]`` labelled-token counts.
    """

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor

    @classmethod
    def from_rows(cls, logps: torch.Tensor, counts: torch.Tensor) -> PairLogps:
        """Split per-row values of a preference batch (chosen rows first, then rejected ones) into pairs."""
        if logps.shape[0] % 2:
            raise ValueError(
                f"a preference batch has chosen rows then rejected rows (an even number); got {logps.shape[0]}."
            )
        chosen, rejected = logps.chunk(2)
        chosen_tokens, rejected_tokens = counts.chunk(2)
        return cls(chosen, rejected, chosen_tokens, rejected_tokens)


@dataclass(frozen=True)
class PairLosses:
    """Per-pair losses and rewards: ``losses``, ``chosen_rewards``, ``rejected_rewards``, all ``[pairs]``."""

    losses: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor

    def metrics(self) -> dict[str, Metric]:
        """The reward figures of these pairs, each a mean over pairs."""
        chosen, rejected = self.chosen_rewards, self.rejected_rewards
        return {
            "rewards/chosen": Metric.mean(chosen),
            "rewards/rejected": Metric.mean(rejected),
            "rewards/margin": Metric.mean(chosen - rejected),
            "rewards/accuracy": Metric.mean((chosen > rejected).float()),
        }


class DPOLoss(nn.Module):
    """Preference loss of pairs of answers: ``sigmoid`` (DPO), ``hinge`` (RSO), ``ipo``, or the reference-free
    ``simpo`` and ``orpo``.

    Args:
        loss_type: "sigmoid", "hinge", "ipo", "simpo" or "orpo".
        beta: the temperature β (> 0): DPO's KL strength, the hinge's margin scale (torchtune's
            RSOLoss calls it gamma), IPO's regulariser τ, SimPO's reward scale, ORPO's λ (the
            weight of the odds-ratio term beside the supervised one; TRL's default 0.1).
        gamma: SimPO's target margin γ; required for "simpo", refused for the others.
        label_smoothing: ε in [0, 0.5), the assumed share of flipped preference labels
            (conservative DPO); "sigmoid" and "simpo" only (TRL's hinge, IPO and ORPO ignore it: refused here).
        num_chunks: blocks the labelled tokens are projected to the vocabulary in.

    Raises:
        ValueError: for an unknown loss_type or an out-of-range or mismatched argument.
    """

    #: Reads hidden states across whole rows (a sequence's sum): callers must not drop positions.
    token_wise: bool = False

    def __init__(
        self,
        loss_type: Literal["sigmoid", "hinge", "ipo", "simpo", "orpo"],
        *,
        beta: float,
        gamma: float | None = None,
        label_smoothing: float = 0.0,
        num_chunks: int = 8,
    ) -> None:
        super().__init__()
        if loss_type not in LOSS_TYPES:
            raise ValueError(f"DPOLoss: loss_type must be one of {list(LOSS_TYPES)}, got {loss_type!r}.")
        if not beta > 0:
            raise ValueError(f"DPOLoss: beta must be > 0, got {beta!r} (DPO commonly uses 0.1).")
        if (gamma is None) == (loss_type == "simpo"):
            raise ValueError(
                f"DPOLoss: gamma is SimPO's target margin: set it for loss_type 'simpo' (e.g. gamma: 0.5) and "
                f"leave it null otherwise; got loss_type {loss_type!r}, gamma {gamma!r}."
            )
        if not 0.0 <= label_smoothing < 0.5 or (label_smoothing and loss_type in ("hinge", "ipo", "orpo")):
            raise ValueError(
                f"DPOLoss: label_smoothing must be in [0, 0.5), and 0 for 'hinge', 'ipo' and 'orpo'; got {label_smoothing!r} "
                f"with loss_type {loss_type!r}."
            )
        if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
            raise ValueError(f"DPOLoss: num_chunks must be a positive int, got {num_chunks!r}.")
        self.loss_type, self.beta, self.gamma = loss_type, float(beta), gamma
        self.label_smoothing, self.num_chunks = float(label_smoothing), num_chunks
        self.ignore_index = IGNORE_INDEX

    @property
    def needs_reference(self) -> bool:
        """False for SimPO and ORPO: no reference model is run."""
        return self.loss_type not in REFERENCE_FREE

    def chunk_loss(self, head: OutputHead, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``log p(label)`` of one block of labelled tokens (the unit ``ftune.training.compile_loss`` compiles)."""
        return token_logps(head, hidden, labels)

    def row_logps(
        self,
        head: OutputHead,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        document_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row of ``hidden [rows, s, dim]`` / shifted ``labels [rows, s]`` (per document of a packed
        row with its ``document_ids``), through the model's head (``model.head``): summed
        log-probability and count."""
        return sequence_logps(
            head,
            hidden,
            labels,
            num_chunks=self.num_chunks,
            chunk_fn=self.chunk_loss,
            document_ids=document_ids,
        )

    def logps_of(
        self,
        head: OutputHead,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        document_ids: torch.Tensor | None = None,
    ) -> PairLogps:
        """The pairs' log-probabilities of a preference batch's hidden states (chosen rows, then rejected;
        or, packed, chosen documents, then rejected ones: ``ftune.data.padding_free_collate_preference``)."""
        return PairLogps.from_rows(*self.row_logps(head, hidden, labels, document_ids))

    def forward(self, policy: PairLogps, reference: PairLogps | None) -> PairLosses:
        """Per-pair losses and rewards.

        Args:
            policy: the trained model's log-probabilities.
            reference: the reference model's (None for "simpo" and "orpo", required otherwise).

        Returns:
            :class:`PairLosses`, each ``[pairs]`` fp32.
        """
        if (reference is None) == self.needs_reference:
            raise ValueError(
                f"DPOLoss({self.loss_type!r}): "
                + (
                    "needs the reference model's log-probabilities"
                    if self.needs_reference
                    else "is reference-free"
                )
            )
        eps = self.label_smoothing
        if self.loss_type == "simpo":
            chosen = self.beta * policy.chosen / policy.chosen_tokens.clamp(min=1)
            rejected = self.beta * policy.rejected / policy.rejected_tokens.clamp(min=1)
            h = chosen - rejected - self.gamma
            losses = -(1 - eps) * F.logsigmoid(h) - eps * F.logsigmoid(-h)
            return PairLosses(losses, chosen, rejected)
        if self.loss_type == "orpo":
            chosen = policy.chosen / policy.chosen_tokens.clamp(min=1)  # mean log-probability a token
            rejected = policy.rejected / policy.rejected_tokens.clamp(min=1)
            losses = -self.beta * F.logsigmoid(log_odds_ratio(chosen, rejected))
            return PairLosses(losses, self.beta * chosen, self.beta * rejected)
        chosen_ratio = policy.chosen - reference.chosen
        rejected_ratio = policy.rejected - reference.rejected
        if self.loss_type == "sigmoid":
            h = self.beta * (chosen_ratio - rejected_ratio)
            losses = -(1 - eps) * F.logsigmoid(h) - eps * F.logsigmoid(-h)
        elif self.loss_type == "hinge":
            losses = torch.relu(1 - self.beta * (chosen_ratio - rejected_ratio))
        else:  # ipo: log-ratios per labelled token
            h = chosen_ratio / policy.chosen_tokens.clamp(
                min=1
            ) - rejected_ratio / policy.rejected_tokens.clamp(min=1)
            losses = (h - 1 / (2 * self.beta)) ** 2
        return PairLosses(losses, self.beta * chosen_ratio, self.beta * rejected_ratio)


def log1m_exp(x: torch.Tensor) -> torch.Tensor:
    """``log(1 - e^x)`` for ``x < 0``, accurate on both sides of ``-log 2`` (log1p for x far below 0,
    expm1 near 0, where ``1 - e^x`` cancels)."""
    return torch.where(x < -math.log(2.0), torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def log_odds_ratio(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """ORPO's ``log(odds(c) / odds(r))`` from mean log-probabilities ``a``: ``odds = p / (1 - p)``, ``p = e^a``."""
    return (chosen - rejected) - (log1m_exp(chosen) - log1m_exp(rejected))
