"""The frozen model a preference or RL loss measures the policy against (DPO's and GRPO's reference).

Build it with :meth:`ReferenceModel.adapters_off` (LoRA: the policy itself with its adapters
switched off, no second copy of the weights) or :meth:`ReferenceModel.frozen` (full fine-tuning: a
second model built from the base checkpoint, also on a resumed run, sharded like the policy under
FSDP2). Its passes run without gradients, through the reference's own output head (``model.head``:
a soft-capped model's logits are capped), and leave the policy's router state as it was: a LoRA
reference reruns the policy's own mixture-of-experts blocks, whose router logits the policy's aux
loss reads (``ftune.training.step.aux_loss.keep_router_state``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from ftune.modules.transformer import OutputHead
from ftune.peft.disable import adapters_disabled
from ftune.peft.lora import LoRALinear
from ftune.training.methods.dpo_loss import DPOLoss, PairLogps
from ftune.training.methods.grpo_loss import GRPOLoss
from ftune.training.methods.kto_loss import KTOLogps, KTOLoss
from ftune.training.methods.preference_loss import check_preference
from ftune.training.step.aux_loss import keep_router_state
from ftune.training.step.micro_batch import MicroBatch

T = TypeVar("T")


class ReferenceModel:
    """The frozen reference of a DPO or GRPO recipe.

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
    def scores(self, batch: MicroBatch, score: Callable[[OutputHead, torch.Tensor], T]) -> T:
        """``score(head, hidden)`` of the reference's final hidden states of ``batch``, no gradients.

        Args:
            batch: a micro-batch; the reference gets the policy's forward inputs (``batch.model_inputs``).
            score: turns the reference's output head (``model.head``) and its hidden states
                ``[b, s, dim]`` into what the loss needs (log-probabilities); it runs while the
                adapters are off.
        """
        if self.disable_adapters:
            # The policy's own modules: its router state (the policy forward's) is put back after.
            with adapters_disabled(self.model), keep_router_state(self.model):
                hidden = self.model.hidden(batch.tokens, **batch.model_inputs)  # (b, s, dim)
                out = score(self.model.head, hidden)
        else:
            hidden = self.model.hidden(batch.tokens, **batch.model_inputs)  # the policy's inputs
            out = score(self.model.head, hidden)
        if isinstance(self.model, FSDPModule) and not self.disable_adapters:
            self.model.reshard()  # no backward follows: free the root's gathered parameters
        return out

    def row_logps(self, loss_fn: DPOLoss | KTOLoss, batch: MicroBatch) -> PairLogps | KTOLogps | None:
        """DPO and KTO: the reference's summed log-probabilities of each answer of a preference batch (a KTO
        batch's completions and mismatched rows); None for a reference-free loss (SimPO, ORPO), which does
        not run it."""
        check_preference(loss_fn, batch)
        if not loss_fn.needs_reference:
            return None
        if isinstance(loss_fn, KTOLoss):
            return self.scores(batch, lambda head, h: loss_fn.logps_of(head, h, batch.labels))
        return self.scores(batch, lambda head, h: loss_fn.logps_of(head, h, batch.labels, batch.document_ids))

    def token_logps(self, loss_fn: GRPOLoss, batch: MicroBatch, temperature: float) -> torch.Tensor | None:
        """GRPO: the reference's log-probability of each labelled token ``[b, s]`` at the sampling
        temperature (0 elsewhere); None when the loss has no KL term (beta 0), which does not run it."""
        if not loss_fn.needs_reference:
            return None
        return self.scores(batch, lambda head, h: loss_fn.token_logps(head, h / temperature, batch.labels))
