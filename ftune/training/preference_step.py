"""The parts of a preference (DPO) training step that must behave the same in every DPO recipe.

A DPO step differs from a supervised one in two places, both here: its loss is a mean over the
step's *pairs*, not over its tokens (:class:`PairStepLoss`), and each micro-batch is scored by
the policy and by a frozen reference (:func:`preference_loss`, :class:`ReferenceModel`). The
recipe still writes the step out (forward, backward, clipping, optimizer and scheduler).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from ftune.peft.disable import adapters_disabled
from ftune.peft.lora import LoRALinear
from ftune.runtime.rank import world_size
from ftune.training.batch_loss import check_batch, shift_labels
from ftune.training.dpo_loss import DPOLoss, PairLogps, PairLosses
from ftune.training.fsdp import all_reduce_sum
from ftune.training.step import Batch, StepLoss, StepStats


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
    def row_logps(self, loss_fn: DPOLoss, tokens: torch.Tensor, labels: torch.Tensor) -> PairLogps:
        """The reference's summed log-probabilities of each answer of a preference batch, without gradients."""
        if self.disable_adapters:
            with adapters_disabled(self.model):
                hidden = self.model.hidden(tokens, input_pos=None, mask=None)  # (2b, s, dim)
        else:
            hidden = self.model.hidden(tokens, input_pos=None, mask=None)
        logps = PairLogps.from_rows(*loss_fn.row_logps(self.model.output_weight, hidden, labels))
        if isinstance(self.model, FSDPModule) and not self.disable_adapters:
            self.model.reshard()  # no backward follows: free the root's gathered parameters
        return logps


def preference_batch(
    loss_fn: DPOLoss, batch: Batch, *, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a preference batch and its loss; return its ``tokens`` and shifted ``labels`` on ``device``.

    Raises:
        ValueError: for a packed batch (preference pairs are not packed), or a loss that is not a DPOLoss.
    """
    if not isinstance(loss_fn, DPOLoss):
        raise ValueError(
            f"loss: the DPO recipes score pairs of answers and need loss._component_=ftune.training.DPOLoss; "
            f"got {type(loss_fn).__module__}.{type(loss_fn).__name__}."
        )
    check_batch(batch)
    if "document_ids" in batch:
        raise ValueError(
            "preference_loss got a packed batch; DPO scores whole answers and does not support packing."
        )
    tokens = batch["tokens"].to(device, non_blocking=True)
    return tokens, shift_labels(batch["labels"].to(device, non_blocking=True))  # (2b, s)


def preference_loss(
    model: nn.Module,
    loss_fn: DPOLoss,
    batch: Batch,
    *,
    device: torch.device,
    reference: ReferenceModel,
) -> tuple[torch.Tensor, PairLosses]:
    """Forward one preference batch through the reference (no gradients) and the policy.

    Args:
        model: the policy, a decoder with ``hidden(...)`` and ``output_weight``.
        loss_fn: a :class:`ftune.training.DPOLoss`.
        batch: ``tokens`` and ``labels`` ``[2b, s]`` from ``ftune.data.padded_collate_preference``
            (chosen rows, then the rejected rows of the same pairs).
        device: where the model lives.
        reference: the reference model (not run for the reference-free "simpo" loss).

    Returns:
        ``(loss_sum, pairs)``: the sum of the batch's per-pair losses (divide by the step's pairs:
        :class:`PairStepLoss` does), and the per-pair losses and rewards.

    Raises:
        ValueError: for a packed batch (preference pairs are not packed), or a loss that is not a DPOLoss.
    """
    tokens, labels = preference_batch(loss_fn, batch, device=device)
    ref = reference.row_logps(loss_fn, tokens, labels) if loss_fn.needs_reference else None
    hidden = model.hidden(tokens, input_pos=None, mask=None)  # (2b, s, dim)
    policy = PairLogps.from_rows(*loss_fn.row_logps(model.output_weight, hidden, labels))
    pairs = loss_fn(policy, ref)
    return pairs.losses.sum(), pairs


class PairStepLoss(StepLoss):
    """:class:`ftune.training.StepLoss` for preference batches: the step's loss is the mean over its pairs.

    DPO's loss is one number per pair (a chosen and a rejected answer), so the step normalises
    by the number of pairs of every micro-batch on every rank, counted before the first backward:
    the gradient is that of the mean over all the step's pairs, whatever the split into
    micro-batches or ranks. ``tokens_trained`` still counts the labelled tokens. The rewards of
    each micro-batch are recorded with :meth:`record` and logged as step means.
    """

    def __init__(
        self, micro_batches: list[Batch], optimizer: torch.optim.Optimizer, *, step: int, device: torch.device
    ) -> None:
        super().__init__(micro_batches, optimizer, step=step, device=device)
        local = torch.tensor(sum(b["tokens"].shape[0] // 2 for b in micro_batches), device=device)
        self.num_pairs = int(all_reduce_sum(local).item())
        self._denominator = max(self.num_pairs, 1)
        self._scale = world_size() / self._denominator
        self._rewards: dict[str, torch.Tensor] = {}

    def record(self, pairs: PairLosses) -> None:
        """Add a micro-batch's rewards to the step's figures."""
        for key, value in pairs.sums().items():
            self._rewards[key] = self._rewards.get(key, 0.0) + value.float()

    def finish(self, grad_norm: torch.Tensor | float | None = None) -> StepStats:
        """As ``StepLoss.finish``, with the step's mean rewards over all ranks in ``metrics``."""
        stats = super().finish(grad_norm)
        keys = sorted(self._rewards)
        if not keys:
            return stats
        totals = all_reduce_sum(torch.stack([self._rewards[k] for k in keys]))
        means = {k: float(v) / self._denominator for k, v in zip(keys, totals.tolist())}
        return dataclasses.replace(stats, metrics={**stats.metrics, **means})
