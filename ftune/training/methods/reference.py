"""The frozen model a preference or RL loss measures the policy against (DPO's and GRPO's reference).

Build it with :meth:`ReferenceModel.adapters_off` (LoRA: the policy itself with its adapters
switched off, no second copy of the weights) or :meth:`ReferenceModel.frozen` (full fine-tuning: a
second model built from the base checkpoint, also on a resumed run, sharded like the policy under
FSDP2). Its passes run without gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from ftune.peft.disable import adapters_disabled
from ftune.peft.lora import LoRALinear
from ftune.training.methods.dpo_loss import DPOLoss, PairLogps
from ftune.training.methods.grpo_loss import GRPOLoss
from ftune.training.methods.preference_step import check_preference
from ftune.training.step.batch_loss import MicroBatch, refuse_moe

T = TypeVar("T")


class ReferenceModel:
    """The frozen reference of a DPO or GRPO recipe.

    Attributes:
        model: the module the reference forward runs.
        disable_adapters: run ``model`` inside ``ftune.peft.adapters_disabled``.
    """

    def __init__(self, model: nn.Module, *, disable_adapters: bool) -> None:
        # A LoRA reference pass reruns the policy's own MoE blocks and would overwrite the router
        # logits the balancing loss reads; DPO and GRPO leave MoE models out until they add it.
        refuse_moe(model, "DPO / GRPO")
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
    def scores(self, batch: MicroBatch, score: Callable[[torch.Tensor, torch.Tensor], T]) -> T:
        """``score(output_weight, hidden)`` of the reference's final hidden states of ``batch``, no gradients.

        Args:
            batch: an unpacked micro-batch (its tokens are read).
            score: turns the output projection ``[vocab, dim]`` and the hidden states ``[b, s, dim]``
                into what the loss needs (log-probabilities); it runs while the adapters are off.
        """
        if self.disable_adapters:
            with adapters_disabled(self.model):
                hidden = self.model.hidden(batch.tokens, input_pos=None, mask=None)  # (b, s, dim)
                out = score(self.model.output_weight, hidden)
        else:
            hidden = self.model.hidden(batch.tokens, input_pos=None, mask=None)
            out = score(self.model.output_weight, hidden)
        if isinstance(self.model, FSDPModule) and not self.disable_adapters:
            self.model.reshard()  # no backward follows: free the root's gathered parameters
        return out

    def row_logps(self, loss_fn: DPOLoss, batch: MicroBatch) -> PairLogps | None:
        """DPO: the reference's summed log-probabilities of each answer of a preference batch; None for a
        reference-free loss (SimPO), which does not run it."""
        check_preference(loss_fn, batch)
        if not loss_fn.needs_reference:
            return None
        return self.scores(batch, lambda w, h: PairLogps.from_rows(*loss_fn.row_logps(w, h, batch.labels)))

    def token_logps(self, loss_fn: GRPOLoss, batch: MicroBatch, temperature: float) -> torch.Tensor | None:
        """GRPO: the reference's log-probability of each labelled token ``[b, s]`` at the sampling
        temperature (0 elsewhere); None when the loss has no KL term (beta 0), which does not run it."""
        if not loss_fn.needs_reference:
            return None
        return self.scores(batch, lambda w, h: loss_fn.token_logps(w, h / temperature, batch.labels))
