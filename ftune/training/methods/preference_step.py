"""The parts of a preference (DPO) step that must behave the same in every DPO recipe.

A DPO recipe's ``loss_on(batch)`` scores each micro-batch with a frozen reference
(:class:`ReferenceModel`) and with the policy, and :func:`preference_loss` turns the two into the
batch's summed pair losses and the figures logged with them. Its step is a mean over *pairs*
(``StepLoss(per=training.per_pair)``), not over tokens; validation calls the same ``loss_on``.

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
from torch.distributed.fsdp import FSDPModule

from ftune.peft.disable import adapters_disabled
from ftune.peft.lora import LoRALinear
from ftune.training.methods.dpo_loss import DPOLoss, PairLogps
from ftune.training.step.batch_loss import Loss, MicroBatch


class ReferenceModel:
    """The frozen model DPO measures the policy against.

    Build it with :meth:`adapters_off` (LoRA: the policy itself with its adapters switched off, no
    second copy of the weights) or :meth:`frozen` (full fine-tuning: a second model built from the
    base checkpoint, also on a resumed run, to be sharded like the policy under FSDP2).

    Attributes:
        model: the module the reference forward runs.
        disable_adapters: run ``model`` inside ``ftune.peft.adapters_disabled``.
    """

    def __init__(self, model: nn.Module, *, disable_adapters: bool) -> None:
        self.model, self.disable_adapters = model, disable_adapters

    @classmethod
    def adapters_off(cls, model: nn.Module) -> ReferenceModel:
        """The policy with its LoRA / DoRA adapters switched off (its frozen base)."""
        if not any(isinstance(m, LoRALinear) for m in model.modules()):
            raise ValueError(
                "ReferenceModel.adapters_off: the model has no adapters; apply the peft section first."
            )
        return cls(model, disable_adapters=True)

    @classmethod
    def frozen(cls, model: nn.Module) -> ReferenceModel:
        """``model`` frozen and in eval mode. It must own its weights: build it from the base checkpoint
        (``Checkpointer.load_base_model``), not from the policy's tensors, which the optimizer updates."""
        model.requires_grad_(False)
        return cls(model.eval(), disable_adapters=False)

    @torch.no_grad()
    def row_logps(self, loss_fn: DPOLoss, batch: MicroBatch) -> PairLogps | None:
        """The reference's summed log-probabilities of each answer of a preference batch, without
        gradients; None for a reference-free loss (SimPO), which does not run it."""
        check_preference(loss_fn, batch)
        if not loss_fn.needs_reference:
            return None
        if self.disable_adapters:
            with adapters_disabled(self.model):
                hidden = self.model.hidden(batch.tokens, input_pos=None, mask=None)  # (2b, s, dim)
        else:
            hidden = self.model.hidden(batch.tokens, input_pos=None, mask=None)
        logps = PairLogps.from_rows(*loss_fn.row_logps(self.model.output_weight, hidden, batch.labels))
        if isinstance(self.model, FSDPModule) and not self.disable_adapters:
            self.model.reshard()  # no backward follows: free the root's gathered parameters
        return logps


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
    weight: torch.Tensor,
    hidden: torch.Tensor,
    batch: MicroBatch,
    reference: PairLogps | None,
) -> Loss:
    """A preference batch's summed pair losses, from the policy's hidden states and the reference's logps.

    Args:
        loss_fn: a :class:`ftune.training.DPOLoss`.
        weight: the policy's output projection (``model.output_weight``).
        hidden: the policy's final hidden states ``[2b, s, dim]`` of ``batch`` (chosen rows, then
            the rejected rows of the same pairs: ``ftune.data.padded_collate_preference``).
        batch: the micro-batch (its shifted labels pick the answers' tokens).
        reference: ``ReferenceModel.row_logps`` of the batch (None for SimPO).

    Returns:
        :class:`ftune.training.Loss`: the sum of the per-pair losses over the batch's pairs, with the
        rewards and log-probability accuracies as sums (see the module docstring).

    Raises:
        ValueError: for a packed batch, or a loss that is not a DPOLoss.
    """
    check_preference(loss_fn, batch)
    policy = PairLogps.from_rows(*loss_fn.row_logps(weight, hidden, batch.labels))
    pairs = loss_fn(policy, reference)
    metrics = {**pairs.sums(), "logps/accuracy": (policy.chosen > policy.rejected).float().sum().detach()}
    if reference is not None:
        metrics["logps/reference_accuracy"] = (reference.chosen > reference.rejected).float().sum()
    return Loss(pairs.losses.sum(), policy.chosen.numel(), metrics)
