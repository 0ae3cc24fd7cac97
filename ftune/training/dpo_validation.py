"""The DPO recipes' validation pass: the preference loss, rewards and log-probability accuracy of held-out pairs.

The supervised recipes validate with :func:`ftune.training.eval_loss` (a token-mean loss); a DPO
run is judged on pairs of answers instead. :func:`eval_preference` scores each held-out pair with
the policy and the reference, as the training step does, and reports means over the pairs:

- ``val_loss``: the config's DPOLoss (sigmoid, IPO or SimPO);
- ``val_rewards/chosen``, ``/rejected``, ``/margin``, ``/accuracy``: the rewards the training step
  logs (``β·(log π - log π_ref)`` of each answer for sigmoid and IPO, ``β·log π / n`` for SimPO);
- ``val_logps/accuracy``: the share of pairs whose chosen answer the policy finds more likely than
  the rejected one (summed log-probabilities). Unlike the rewards it means something for a model
  that has not moved from the reference (whose rewards are all 0);
- ``val_logps/reference_accuracy``: the same share for the reference, the model before training
  (the base model for LoRA, the starting checkpoint for full DPO). The reference never changes,
  so every pass also reports the starting point, without a pass at step 0.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from ftune.training.dpo_loss import DPOLoss, PairLogps
from ftune.training.fsdp import all_reduce_sum
from ftune.training.preference_step import ReferenceModel, preference_batch
from ftune.training.step import Batch

# The figures of a pass, summed over pairs and then divided by their number (loss first).
SUMS = (
    "val_loss",
    "val_rewards/chosen",
    "val_rewards/rejected",
    "val_rewards/margin",
    "val_rewards/accuracy",
    "val_logps/accuracy",
    "val_logps/reference_accuracy",
)


def _batch_sums(loss_fn: DPOLoss, policy: PairLogps, reference: PairLogps) -> torch.Tensor:
    """The :data:`SUMS` of one batch's pairs, in that order, and its number of pairs last (float64)."""
    pairs = loss_fn(policy, reference if loss_fn.needs_reference else None)
    rewards = pairs.sums()
    figures = [
        pairs.losses.sum(),
        rewards["rewards/chosen"],
        rewards["rewards/rejected"],
        rewards["rewards/margin"],
        rewards["rewards/accuracy"],
        (policy.chosen > policy.rejected).sum(),
        (reference.chosen > reference.rejected).sum(),
        torch.tensor(policy.chosen.numel()),
    ]
    return torch.stack([f.detach().to(torch.float64).cpu() for f in figures])


@torch.no_grad()
def eval_preference(
    model: nn.Module,
    reference: ReferenceModel,
    loss_fn: DPOLoss,
    batches: Iterable[Batch],
    *,
    device: torch.device,
    max_batches: int | None = None,
) -> dict[str, float]:
    """Mean preference loss, rewards and log-probability accuracies over held-out pairs, without gradients.

    Each batch runs through the reference, then the policy (in eval mode: no dropout; its previous
    mode is restored afterwards), as in :func:`ftune.training.preference_loss`. The reference also
    runs for the reference-free SimPO loss, for ``val_logps/reference_accuracy``. The sums are
    all-reduced over ranks: every rank reads the same batches (``training.validation_loader``), so
    each figure is the mean over the pairs read, whatever the world size.

    Args:
        model: the policy, a decoder with ``hidden(...)`` and ``output_weight``.
        reference: its reference model (:class:`ftune.training.ReferenceModel`).
        loss_fn: the training loss, a :class:`ftune.training.DPOLoss`.
        batches: preference batches (``ftune.data.padded_collate_preference``: chosen rows, then rejected).
        device: where the model lives.
        max_batches: stop after this many batches; None reads them all.

    Returns:
        ``{name: mean over pairs}`` for every name of :data:`SUMS` (the keys the recipes log).

    Raises:
        ValueError: if ``max_batches`` is negative, no pair was read, or a batch or the loss is not a
            preference one.
    """
    if max_batches is not None and max_batches < 0:
        raise ValueError(f"eval_preference: max_batches must be >= 0 or None, got {max_batches}.")
    was_training = model.training
    model.eval()
    totals = torch.zeros(len(SUMS) + 1, dtype=torch.float64)
    try:
        for i, batch in enumerate(batches):
            if max_batches is not None and i >= max_batches:
                break
            tokens, labels = preference_batch(loss_fn, batch, device=device)
            ref = reference.row_logps(loss_fn, tokens, labels)
            hidden = model.hidden(tokens, input_pos=None, mask=None)  # (2b, s, dim)
            policy = PairLogps.from_rows(*loss_fn.row_logps(model.output_weight, hidden, labels))
            totals += _batch_sums(loss_fn, policy, ref)
    finally:
        model.train(was_training)
        if isinstance(model, FSDPModule):
            model.reshard()  # no backward followed: free the root's gathered parameters
    # One collective for the whole pass; on the device the process group communicates from.
    totals = all_reduce_sum(totals.to(device)).cpu()
    num_pairs = int(totals[-1].item())
    if num_pairs == 0:
        raise ValueError(
            f"eval_preference read no pair (max_batches={max_batches}). Check that dataset_val is not "
            "empty and that max_val_batches is null or >= 1."
        )
    return {name: float(value) / num_pairs for name, value in zip(SUMS, totals.tolist())}
