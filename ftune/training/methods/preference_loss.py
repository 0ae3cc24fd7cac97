"""A preference (DPO) micro-batch's loss: what every DPO recipe's ``loss_on`` returns.

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
  for SimPO, which runs no reference). The reference never changes, so every validation pass also
  reports the starting point, without a pass at step 0.
"""

from __future__ import annotations

import torch
from torch import nn

from ftune.training.methods.dpo_loss import DPOLoss, PairLogps
from ftune.training.step.aux_loss import with_aux_loss
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import MicroBatch, per_pair


def check_preference(loss_fn: DPOLoss, batch: MicroBatch) -> None:
    """Refuse a loss that is not a DPOLoss, or a packed batch (preference pairs are not packed)."""
    if not isinstance(loss_fn, DPOLoss):
        raise ValueError(
            f"loss: the DPO recipes score pairs of answers and need loss._component_=ftune.training.DPOLoss; "
            f"got {type(loss_fn).__module__}.{type(loss_fn).__name__}."
        )
    if batch.document_ids is not None:
        raise ValueError(
            "preference_loss got a packed batch; DPO scores whole answers and does not support packing."
        )


def preference_loss(
    loss_fn: DPOLoss,
    model: nn.Module,
    hidden: torch.Tensor,
    batch: MicroBatch,
    reference: PairLogps | None,
) -> Loss:
    """A preference batch's summed pair losses, from the policy's hidden states and the reference's logps.

    Args:
        loss_fn: a :class:`ftune.training.DPOLoss`.
        model: the policy whose ``hidden`` these are (its output head, and its router logits).
        hidden: the policy's final hidden states ``[2b, s, dim]`` of ``batch`` (chosen rows, then
            the rejected rows of the same pairs: ``ftune.data.padded_collate_preference``).
        batch: the micro-batch (its shifted labels pick the answers' tokens).
        reference: ``ReferenceModel.row_logps`` of the batch (None for SimPO).

    Returns:
        :class:`ftune.training.Loss`: the sum of the per-pair losses over the batch's pairs (its
        count: :func:`ftune.training.per_pair`), with the rewards and log-probability accuracies as
        means over pairs (see the module docstring).

    Raises:
        ValueError: for a packed batch, or a loss that is not a DPOLoss.
    """
    check_preference(loss_fn, batch)
    policy = PairLogps.from_rows(*loss_fn.row_logps(model.head, hidden, batch.labels))
    pairs = loss_fn(policy, reference)
    metrics = {**pairs.metrics(), "logps/accuracy": Metric.mean((policy.chosen > policy.rejected).float())}
    if reference is not None:
        metrics["logps/reference_accuracy"] = Metric.mean((reference.chosen > reference.rejected).float())
    return with_aux_loss(model, batch, Loss(pairs.losses.sum(), int(per_pair(batch)), metrics))
