"""A preference (DPO, ORPO, KTO) micro-batch's loss: what every DPO recipe's ``loss_on`` returns.

A DPO recipe's ``loss_on(batch)`` scores each micro-batch with a frozen reference
(:class:`ftune.training.ReferenceModel`) and with the policy, and :func:`preference_loss` turns the two into the
batch's summed pair losses and the figures logged with them. Its step is a mean over *pairs*
(``StepLoss(per=training.per_pair)``), not over tokens; validation calls the same ``loss_on`` and
divides by the same count (``Loss.count`` is ``per_pair`` of the batch). A mixture-of-experts
policy adds its balancing loss of its own forward (as TRL's DPOTrainer adds ``router_aux_loss_coef *
aux_loss`` to the mean pair loss).

The figures (means over pairs, ``val_`` prefixed in validation):

- ``rewards/chosen``, ``/rejected``, ``/margin``, ``/accuracy``: ``β·(log π - log π_ref)`` of each
  answer for sigmoid and IPO, ``β·log π / n`` for SimPO;
- ``logps/accuracy``: the share of pairs whose chosen answer the policy finds more likely than the
  rejected one (summed log-probabilities). Unlike the rewards it means something for a model that
  has not moved from the reference (whose rewards are all 0);
- ``logps/reference_accuracy``: the same share for the reference, the model before training (not
  for SimPO and ORPO, which run no reference). The reference never changes, so every validation pass
  also reports the starting point, without a pass at step 0.

ORPO (``DPOLoss(loss_type="orpo")``) adds its supervised term: the token cross-entropy of the chosen
rows, over the prompt and the answer (every real token, as TRL's ORPOTrainer computes it), a mean over
the micro-batch's tokens, weighted by its pairs in the step. It logs TRL's figures besides: ``nll_loss``,
``log_odds_ratio`` (the mean ``log σ(h)``), ``log_odds_chosen`` (the mean log odds ratio ``h``) and
``logps/chosen``, ``logps/rejected`` (mean log-probability a token of each answer). A KTO batch
(``ftune.training.KTOLoss``: unpaired answers) goes to ``ftune.training.methods.kto_loss.kto_loss``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.transformer import OutputHead
from ftune.training.methods.dpo_loss import DPOLoss, PairLogps, log_odds_ratio
from ftune.training.methods.kto_loss import KTOLogps, KTOLoss, kto_loss, kto_rows
from ftune.training.step.aux_loss import with_aux_loss
from ftune.training.step.loss import IGNORE_INDEX
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import MicroBatch, per_pair, real_tokens


def check_preference(loss_fn: DPOLoss | KTOLoss, batch: MicroBatch) -> None:
    """Refuse a loss that is neither a DPOLoss nor a KTOLoss, a packed batch for KTO or ORPO (they read
    padded rows), or a loss the batch is not for."""
    if not isinstance(loss_fn, (DPOLoss, KTOLoss)):
        raise ValueError(
            f"loss: the DPO recipes score answers against each other and need loss._component_="
            f"ftune.training.DPOLoss (pairs) or ftune.training.KTOLoss (unpaired, labelled answers); "
            f"got {type(loss_fn).__module__}.{type(loss_fn).__name__}."
        )
    if batch.document_ids is not None and (isinstance(loss_fn, KTOLoss) or loss_fn.loss_type == "orpo"):
        name = "KTOLoss" if isinstance(loss_fn, KTOLoss) else 'DPOLoss("orpo")'
        raise ValueError(
            f"collate_fn: {name} scores rows of a padded batch, and the batch is packed (its rows laid end to "
            "end: padding_free_collate_preference). Pairs are packed for the other DPO losses only; set "
            "collate_fn=null (right padding) for this loss."
        )
    if isinstance(loss_fn, KTOLoss):
        kto_rows(batch)  # raises for a batch that is not KTO's
    elif batch.row_kinds is not None:
        raise ValueError(
            "loss: the dataset gives unpaired KTO records (ftune.datasets.kto_dataset) but the loss is "
            f"DPOLoss({loss_fn.loss_type!r}), which scores pairs. Set loss._component_=ftune.training.KTOLoss "
            "(with beta), or use a paired dataset (ftune.datasets.preference_dataset)."
        )


def orpo_nll(loss_fn: DPOLoss, head: OutputHead, hidden: torch.Tensor, batch: MicroBatch) -> torch.Tensor:
    """ORPO's supervised term: the mean token cross-entropy of the chosen rows' prompt and answer.

    Every real token of a chosen row after its first is a target (TRL's ORPOTrainer: the prompt too),
    through the model's head, in the loss's blocks.
    """
    pairs = batch.rows // 2
    tokens, real = batch.tokens[:pairs], real_tokens(batch)[:pairs]  # (pairs, s)
    targets = tokens[:, 1:].masked_fill(~real[:, 1:], IGNORE_INDEX)  # position t predicts token t + 1
    targets = torch.cat([targets, targets.new_full((pairs, 1), IGNORE_INDEX)], dim=1)  # (pairs, s)
    sums, counts = loss_fn.row_logps(head, hidden[:pairs], targets)
    return -sums.sum() / counts.sum().clamp(min=1)


def _orpo_metrics(policy: PairLogps, nll: torch.Tensor, pairs: int) -> dict[str, Metric]:
    chosen = policy.chosen / policy.chosen_tokens.clamp(min=1)
    rejected = policy.rejected / policy.rejected_tokens.clamp(min=1)
    h = log_odds_ratio(chosen, rejected)
    return {
        "nll_loss": Metric.ratio(nll * pairs, pairs),  # the micro-batch's mean, weighted by its pairs
        "log_odds_ratio": Metric.mean(F.logsigmoid(h)),
        "log_odds_chosen": Metric.mean(h),
        "logps/chosen": Metric.mean(chosen),
        "logps/rejected": Metric.mean(rejected),
    }


def preference_loss(
    loss_fn: DPOLoss,
    model: nn.Module,
    hidden: torch.Tensor,
    batch: MicroBatch,
    reference: PairLogps | KTOLogps | None,
) -> Loss:
    """A preference batch's summed pair losses, from the policy's hidden states and the reference's logps.

    Args:
        loss_fn: a :class:`ftune.training.DPOLoss`, or a :class:`ftune.training.KTOLoss` (then
            :func:`ftune.training.methods.kto_loss.kto_loss`).
        model: the policy whose ``hidden`` these are (its output head, and its router logits).
        hidden: the policy's final hidden states ``[2b, s, dim]`` of ``batch`` (chosen rows, then
            the rejected rows of the same pairs: ``ftune.data.padded_collate_preference``), or
            ``[1, n, dim]`` of the same sequences laid end to end (``padding_free_collate_preference``).
        batch: the micro-batch (its shifted labels pick the answers' tokens).
        reference: ``ReferenceModel.row_logps`` of the batch (None for SimPO and ORPO).

    Returns:
        :class:`ftune.training.Loss`: the sum of the per-pair losses over the batch's pairs (its
        count: :func:`ftune.training.per_pair`), with the rewards and log-probability accuracies as
        means over pairs (see the module docstring).

    Raises:
        ValueError: for a packed KTO or ORPO batch, or a loss that is neither a DPOLoss nor a KTOLoss.
    """
    check_preference(loss_fn, batch)
    if isinstance(loss_fn, KTOLoss):
        return kto_loss(loss_fn, model, hidden, batch, reference)
    policy = loss_fn.logps_of(model.head, hidden, batch.labels, batch.document_ids)
    pairs = loss_fn(policy, reference)
    count = int(per_pair(batch))
    loss_sum = pairs.losses.sum()
    metrics = {**pairs.metrics(), "logps/accuracy": Metric.mean((policy.chosen > policy.rejected).float())}
    if reference is not None:
        metrics["logps/reference_accuracy"] = Metric.mean((reference.chosen > reference.rejected).float())
    if loss_fn.loss_type == "orpo":
        nll = orpo_nll(loss_fn, model.head, hidden, batch)
        loss_sum = loss_sum + count * nll  # TRL: nll - mean(β log σ(h)), per micro-batch
        metrics.update(_orpo_metrics(policy, nll.detach(), count))
    return with_aux_loss(model, batch, Loss(loss_sum, count, metrics))
