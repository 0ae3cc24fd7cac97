"""A reward model's loss: Bradley-Terry on the scores of each pair's chosen and rejected answers.

A reward model (``ftune.modules.score_head``: the decoder with a scalar ``score`` head on each row's
last real token) scores a preference batch's rows, chosen rows first, then the rejected rows of the
same pairs (``ftune.data.padded_collate_preference``). With ``r_c`` and ``r_r`` the scores of a pair,
as TRL's RewardTrainer (1.16) computes it:

- the pair's loss ``-log σ(r_c - r_r - m)``, ``m`` the pair's margin (a dataset's margin column,
  ``MicroBatch.margins``; 0 without one);
- plus, with ``center_rewards_coefficient`` c, ``c·(r_c + r_r)²`` (Eisenstein et al. 2023), which
  keeps the scores centred on 0.

The step's loss is the mean over its pairs (``StepLoss(per=training.per_pair)``), so one micro-batch
gives TRL's ``mean(-log σ(...)) + c·mean((r_c + r_r)²)`` exactly. Logged, under TRL's names (means over
pairs; ``val_`` prefixed in validation): ``accuracy`` (the share of pairs with ``r_c > r_r``), ``margin``
(the mean ``r_c - r_r``), and over every scored row ``min_reward``, ``mean_reward``, ``max_reward``
(TRL averages its per-batch minimum and maximum over the logging window; here they are the step's own
extremes: the same for one micro-batch a step).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.score_head import ScoreHead
from ftune.training.step.aux_loss import with_aux_loss
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import MicroBatch, per_pair


class RewardLoss(nn.Module):
    """The Bradley-Terry loss of a reward model's pair scores, with TRL's options.

    Args:
        center_rewards_coefficient: c (>= 0) of the centring term ``c·(r_c + r_r)²``; None or 0: none
            (TRL's default None; its docs suggest 0.01).

    Raises:
        ValueError: a negative or non-numeric coefficient.
    """

    #: Reads whole rows (each row's last real token): callers must not drop positions.
    token_wise: bool = False
    #: A reward model compares its own scores: no reference model.
    needs_reference: bool = False

    def __init__(self, *, center_rewards_coefficient: float | None = None) -> None:
        super().__init__()
        coef = center_rewards_coefficient
        if coef is not None and (
            isinstance(coef, bool) or not isinstance(coef, (int, float)) or not coef >= 0
        ):
            raise ValueError(
                f"loss.center_rewards_coefficient: RewardLoss needs a number >= 0 or null, got {coef!r}; "
                "TRL's default is null (no centring), its docs suggest 0.01."
            )
        self.center_rewards_coefficient = float(coef) if coef else None

    def forward(
        self, chosen: torch.Tensor, rejected: torch.Tensor, margins: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[pairs]`` losses of the pairs' scores ``chosen`` and ``rejected`` (each ``[pairs]`` fp32)."""
        diff = chosen - rejected if margins is None else chosen - rejected - margins
        losses = -F.logsigmoid(diff)
        if self.center_rewards_coefficient is not None:
            losses = losses + self.center_rewards_coefficient * (chosen + rejected) ** 2
        return losses


def reward_head(model: nn.Module) -> ScoreHead:
    """The model's ``score`` head.

    Raises:
        ValueError: for a model without one (a language model given to a reward recipe).
    """
    head = getattr(model, "score", None)
    if not isinstance(head, ScoreHead):
        raise ValueError(
            f"{type(model).__name__} has no score head: a reward model is the decoder with a scalar head on "
            "its last real token. Call ftune.training.add_score_head(model) after building it (the reward_model "
            "recipes do), or load a reward model's checkpoint (a *ForSequenceClassification folder)."
        )
    return head


def reward_scores(model: nn.Module, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``[b]`` fp32 scores of rows ``tokens [b, s]`` from their final hidden states ``[b, s, dim]``:
    the score head on each row's last non-pad token (transformers' ``ForSequenceClassification``)."""
    return reward_head(model).scores(hidden, tokens)


def reward_loss(loss_fn: RewardLoss, model: nn.Module, hidden: torch.Tensor, batch: MicroBatch) -> Loss:
    """A preference batch's summed pair losses from a reward model's hidden states, as a :class:`Loss`.

    Args:
        loss_fn: a :class:`RewardLoss`.
        model: the reward model whose ``hidden`` these are (its score head, and its router logits).
        hidden: the final hidden states ``[2b, s, dim]`` of ``batch`` (chosen rows, then rejected rows).
        batch: the micro-batch (its tokens find each row's last real token; ``margins`` if the data has them).

    Returns:
        The sum of the per-pair losses (count: :func:`per_pair`), with the figures of the module docstring.

    Raises:
        ValueError: a loss other than RewardLoss, a packed batch, or a model without a score head.
    """
    if not isinstance(loss_fn, RewardLoss):
        raise ValueError(
            "loss: the reward_model recipes train a scalar score with the Bradley-Terry loss and need "
            f"loss._component_=ftune.training.RewardLoss; got {type(loss_fn).__module__}.{type(loss_fn).__name__}."
        )
    if batch.document_ids is not None or batch.rows % 2:
        raise ValueError(
            "reward_loss needs a batch of pairs (chosen rows, then rejected rows, unpacked: "
            f"ftune.data.padded_collate_preference); got {batch.rows} rows"
            + (", packed." if batch.document_ids is not None else ".")
        )
    scores = reward_scores(model, hidden, batch.tokens)  # (2b,)
    chosen, rejected = scores.chunk(2)
    losses = loss_fn(chosen, rejected, batch.margins)
    diff = (chosen - rejected).detach()
    metrics = {
        "accuracy": Metric.mean((diff > 0).float()),
        "margin": Metric.mean(diff),
        "min_reward": Metric.min(scores),
        "mean_reward": Metric.mean(scores),
        "max_reward": Metric.max(scores),
    }
    return with_aux_loss(model, batch, Loss(losses.sum(), int(per_pair(batch)), metrics))
