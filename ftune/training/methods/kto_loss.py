"""KTO (Ethayarajh et al. 2024): a loss on unpaired answers, each marked desirable or undesirable.

A KTO micro-batch (``ftune.data.padded_collate_kto``, from ``ftune.datasets.kto_dataset``) holds
``b`` completions, then ``b`` mismatched rows: row ``b + i`` is completion i's prompt followed by
another completion of the batch. With the log-ratio ``r = log π(y|x) - log π_ref(y|x)`` of each
answer's summed log-probability (π the policy, π_ref the frozen reference), as TRL's KTOTrainer computes it:

- the KL estimate ``z = max(0, mean r of the mismatched rows)``, detached, the mean taken over every
  rank's rows (TRL gathers it over processes);
- a desirable completion's loss ``λ_D·(1 - σ(β·(r - z)))``, an undesirable one's ``λ_U·(1 - σ(β·(z - r)))``.

The step's loss is the mean over its completions: the DPO recipes' ``StepLoss(per=training.per_pair)``
counts a KTO batch's (completion, mismatched row) pairs, one a completion. Logged, as TRL names them:
``kl`` (the estimate z), ``rewards/chosen`` and ``rewards/rejected`` (``β·r``, the means over the desirable
and the undesirable completions), ``logps/chosen`` and ``logps/rejected`` (the policy's summed log-probability),
and ``rewards/margin`` (the difference of the two reward means; TRL's ``rewards/margins``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ftune.data.collate import KTO_DESIRABLE, KTO_MISMATCHED, KTO_UNDESIRABLE
from ftune.modules.transformer import OutputHead
from ftune.training.features.fsdp import all_reduce_sum
from ftune.training.methods.logps import sequence_logps, token_logps
from ftune.training.step.aux_loss import with_aux_loss
from ftune.training.step.loss import IGNORE_INDEX
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import MicroBatch, per_pair


@dataclass(frozen=True)
class KTOLogps:
    """Summed log-probabilities of a KTO batch's rows: ``completions`` and ``mismatched``, each ``[b]`` fp32."""

    completions: torch.Tensor
    mismatched: torch.Tensor


def kto_rows(batch: MicroBatch) -> torch.Tensor:
    """``[b]`` bool: which completions of a KTO batch are desirable.

    Raises:
        ValueError: if ``batch`` is not a KTO batch (``ftune.data.padded_collate_kto``'s layout).
    """
    kinds = batch.row_kinds
    b = batch.rows // 2
    if (
        kinds is None
        or batch.rows % 2
        or not bool((kinds[b:] == KTO_MISMATCHED).all())
        or not bool(((kinds[:b] == KTO_DESIRABLE) | (kinds[:b] == KTO_UNDESIRABLE)).all())
    ):
        given = (
            "a batch without row kinds (pairs, or supervised rows)"
            if kinds is None
            else f"{batch.rows} rows of kinds {kinds.tolist()}"
        )
        raise ValueError(
            "loss: KTOLoss needs unpaired KTO batches from dataset._component_=ftune.datasets.kto_dataset "
            f"(b completions of kinds {KTO_DESIRABLE} desirable / {KTO_UNDESIRABLE} undesirable, then b mismatched "
            f"rows of kind {KTO_MISMATCHED}: ftune.data.padded_collate_kto); got {given}. Use that dataset and the "
            "recipe's default collate_fn (null), or a DPOLoss for pairs of answers."
        )
    return kinds[:b] == KTO_DESIRABLE


class KTOLoss(nn.Module):
    """KTO's loss of unpaired completions against a frozen reference (TRL's ``loss_type="kto"``).

    Args:
        beta: β (> 0), the KL strength (TRL's default 0.1).
        desirable_weight: λ_D (> 0), the weight of a desirable completion's loss.
        undesirable_weight: λ_U (> 0), the weight of an undesirable one's. With unequal counts of the
            two, the KTO paper advises ``λ_D·n_D / (λ_U·n_U)`` in [1, 4/3].
        num_chunks: blocks the labelled tokens are projected to the vocabulary in.

    Raises:
        ValueError: for an out-of-range argument.
    """

    #: Reads hidden states across whole rows (a sequence's sum): callers must not drop positions.
    token_wise: bool = False
    #: KTO compares the policy with its reference: the recipe runs it on every batch.
    needs_reference: bool = True

    def __init__(
        self,
        *,
        beta: float = 0.1,
        desirable_weight: float = 1.0,
        undesirable_weight: float = 1.0,
        num_chunks: int = 8,
    ) -> None:
        super().__init__()
        defaults = {"beta": 0.1, "desirable_weight": 1.0, "undesirable_weight": 1.0}
        given = {"beta": beta, "desirable_weight": desirable_weight, "undesirable_weight": undesirable_weight}
        for name, value in given.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(
                    f"loss.{name}: KTOLoss needs a number > 0, got {value!r}; TRL's default is {defaults[name]}."
                )
        if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
            raise ValueError(f"KTOLoss: num_chunks must be a positive int, got {num_chunks!r}.")
        self.beta, self.num_chunks = float(beta), num_chunks
        self.desirable_weight, self.undesirable_weight = float(desirable_weight), float(undesirable_weight)
        self.ignore_index = IGNORE_INDEX

    def chunk_loss(self, head: OutputHead, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``log p(label)`` of one block of labelled tokens (the unit ``ftune.training.compile_loss`` compiles)."""
        return token_logps(head, hidden, labels)

    def logps_of(self, head: OutputHead, hidden: torch.Tensor, labels: torch.Tensor) -> KTOLogps:
        """The summed log-probability of each row of a KTO batch's hidden states ``[2b, s, dim]``."""
        logps, _ = sequence_logps(head, hidden, labels, num_chunks=self.num_chunks, chunk_fn=self.chunk_loss)
        completions, mismatched = logps.chunk(2)
        return KTOLogps(completions, mismatched)

    def forward(
        self, policy: KTOLogps, reference: KTOLogps, desirable: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-completion losses, rewards ``β·r`` (detached) and the KL estimate z (a detached scalar).

        Args:
            policy, reference: the two models' log-probabilities of the batch.
            desirable: ``[b]`` bool, which completions are desirable.
        """
        mismatched = (policy.mismatched - reference.mismatched).detach().double()
        totals = all_reduce_sum(torch.stack([mismatched.sum(), mismatched.new_tensor(mismatched.numel())]))
        kl = (totals[0] / totals[1]).clamp(min=0).float()  # no gradient, as in TRL
        ratio = policy.completions - reference.completions
        chosen = self.desirable_weight * (1 - torch.sigmoid(self.beta * (ratio - kl)))
        rejected = self.undesirable_weight * (1 - torch.sigmoid(self.beta * (kl - ratio)))
        return torch.where(desirable, chosen, rejected), self.beta * ratio.detach(), kl


def kto_loss(
    loss_fn: KTOLoss, model: nn.Module, hidden: torch.Tensor, batch: MicroBatch, reference: KTOLogps
) -> Loss:
    """A KTO batch's summed completion losses, from the policy's hidden states and the reference's logps.

    Args:
        loss_fn: a :class:`KTOLoss`.
        model: the policy whose ``hidden`` these are (its output head, and its router logits).
        hidden: the policy's final hidden states ``[2b, s, dim]`` of ``batch`` (completions, then
            mismatched rows: their log-ratios enter only the detached KL estimate).
        batch: the micro-batch.
        reference: ``ReferenceModel.row_logps`` of the batch.

    Returns:
        :class:`ftune.training.Loss` over the batch's completions (its count: :func:`per_pair`), with the
        figures of the module docstring.
    """
    desirable = kto_rows(batch)
    policy = loss_fn.logps_of(model.head, hidden, batch.labels)
    losses, rewards, kl = loss_fn(policy, reference, desirable)
    logps = policy.completions.detach()
    metrics = {
        "kl": Metric.ratio(kl, 1.0),
        "rewards/chosen": Metric.mean(rewards[desirable]),
        "rewards/rejected": Metric.mean(rewards[~desirable]),
        "logps/chosen": Metric.mean(logps[desirable]),
        "logps/rejected": Metric.mean(logps[~desirable]),
    }
    if bool(desirable.any()) and bool((~desirable).any()):  # TRL logs the margin of batches with both
        margin = rewards[desirable].mean() - rewards[~desirable].mean()
        metrics["rewards/margin"] = Metric.ratio(margin, 1.0)
    return with_aux_loss(model, batch, Loss(losses.sum(), int(per_pair(batch)), metrics))
