"""The parts of a training step that must behave the same in every recipe.

The step itself (forward, backward, clipping, optimizer and scheduler) is written in each recipe,
where people change it. What is easy to get subtly wrong lives here and is called the same way
everywhere: grouping micro-batches (:func:`accumulate`), token-normalised accumulation and the
non-finite guard (:class:`StepLoss`), and the validation loss (:func:`eval_loss`).
"""

import logging
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from ftune.runtime.rank import world_size
from ftune.training.batch_loss import LossFn, batch_loss, check_batch, shift_labels
from ftune.training.fsdp import all_reduce_sum
from ftune.training.loss import IGNORE_INDEX
from ftune.training.optimizer_in_backward import OptimizerInBackward
from ftune.training.settings import check_optimizer_in_backward

logger = logging.getLogger(__name__)

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class StepStats:
    """What one optimizer step did.

    Attributes:
        loss: mean loss over every non-ignored token of every micro-batch of the step.
        num_tokens: number of those tokens (labels that were trained on).
        grad_norm: total gradient norm before clipping; None when clipping is off.
        lr: learning rate of the first param group used for this step (before the scheduler moved it).
        metrics: further figures a variant of the step logs with it (DPO's rewards); empty for SFT.
    """

    loss: float
    num_tokens: int
    grad_norm: float | None
    lr: float
    metrics: dict[str, float] = field(default_factory=dict)


class NonFiniteError(RuntimeError):
    """The loss or the gradient norm was NaN or infinite; the optimizer step was not taken.

    Attributes:
        step: the number of the step that failed.
        loss: the step's loss.
        grad_norm: the pre-clip gradient norm, or None if it was not computed.
    """

    def __init__(self, step: int, loss: float, grad_norm: float | None) -> None:
        self.step, self.loss, self.grad_norm = step, loss, grad_norm
        norm = "not computed" if grad_norm is None else f"{grad_norm}"
        super().__init__(
            f"Non-finite loss or gradient at step {step}: loss={loss}, grad_norm={norm}. The optimizer step "
            "was skipped, so the weights are those of the last good step. Usual causes: a learning rate "
            "that is too high (lower optimizer.lr or lengthen the warmup), fp16 overflow (use dtype=bf16), "
            "or no gradient clipping (set clip_grad_norm=1.0)."
        )


def _as_float(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        # A DTensor norm (FSDP2) must be gathered before .item().
        value = value.full_tensor() if hasattr(value, "full_tensor") else value
        return float(value.item())
    return float(value)


class StepLoss:
    """Token-normalised loss of one optimizer step, and the non-finite guard that ends it.

    The recipe writes the step itself (forward, backward, clipping, optimizer and scheduler); this
    object holds what is easy to get subtly wrong. It counts the labelled (shifted) tokens of every
    micro-batch of the step first, over all ranks, so that each micro-batch backpropagates
    ``loss_sum / total_tokens``: the step's gradient is then that of the mean loss over all its
    tokens, whatever the split into micro-batches and however unequal their token counts (a mean
    of per-batch means is not). ::

        step_loss = training.StepLoss(micro_batches, optimizer, step=step, device=device)
        for batch in micro_batches:
            loss_sum, _ = training.batch_loss(model, loss_fn, batch, device=device)
            step_loss.scaled(loss_sum).backward()
        stats = step_loss.finish(grad_norm)  # raises NonFiniteError (gradients cleared) if not finite
        optimizer.step()

    Args:
        micro_batches: the collated batches of this step (``tokens``, ``labels``, optionally
            ``input_pos`` and ``document_ids``).
        optimizer: the step's optimizer (read for its learning rate; cleared on a non-finite step).
            With an ``OptimizerInBackward`` the weights change during backward, so the loss is
            checked before each backward instead of after.
        step: the number of this step, used in messages.
        device: where the model lives.

    Raises:
        ValueError: if ``micro_batches`` is empty, or several micro-batches meet an optimizer that
            steps inside backward.
    """

    def __init__(
        self, micro_batches: list[Batch], optimizer: torch.optim.Optimizer, *, step: int, device: torch.device
    ) -> None:
        if not micro_batches:
            raise ValueError(f"StepLoss(step={step}) got no micro-batches; pass a non-empty list.")
        self.optimizer, self.step, self.device = optimizer, step, device
        self.in_backward = isinstance(optimizer, OptimizerInBackward)
        if self.in_backward:
            check_optimizer_in_backward(grad_accum_steps=len(micro_batches), clip_grad_norm=None)
        local = torch.zeros((), dtype=torch.int64, device=device)
        for batch in micro_batches:
            check_batch(batch)
            document_ids = batch["document_ids"].to(device) if "document_ids" in batch else None
            labels = shift_labels(batch["labels"].to(device, non_blocking=True), document_ids)
            local += (labels != IGNORE_INDEX).sum()
        # One sync for the whole step: the normaliser must be known before the first backward. With
        # several ranks it is the global count, and FSDP sums (not averages) the gradients, so the
        # step's gradient is that of the mean over every token of the global batch.
        self.num_tokens = int(all_reduce_sum(local).item())
        if self.num_tokens == 0:
            logger.warning("Step %d has no labelled tokens; its gradient is zero.", step)
        self._denominator = max(self.num_tokens, 1)
        # FSDP averages gradients over ranks; scaling by the world size turns that average into the
        # sum of the ranks' shares of the global token mean (see ftune/training/fsdp.py).
        self._scale = world_size() / self._denominator
        self._total = torch.zeros((), dtype=torch.float32, device=device)

    def scaled(self, loss_sum: torch.Tensor) -> torch.Tensor:
        """Record a micro-batch's summed loss; return the tensor to call ``.backward()`` on."""
        if self.in_backward and not math.isfinite(loss_sum.item()):
            # The hooks update the weights during backward: check before it, not after.
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(self.step, loss_sum.item() / self._denominator, None)
        self._total += loss_sum.detach().float()
        return loss_sum * self._scale

    def finish(self, grad_norm: torch.Tensor | float | None = None) -> StepStats:
        """The step's mean loss over every rank; raise before the optimizer steps if anything is not finite.

        Args:
            grad_norm: the pre-clip total gradient norm (what ``clip_grad_norm_`` returns), or None.

        Returns:
            The step's :class:`StepStats` (the learning rate is the one the optimizer is about to use).

        Raises:
            NonFiniteError: if the loss or the gradient norm is NaN or infinite. The gradients are
                cleared first, so a caller that skips the step inherits nothing.
        """
        loss = all_reduce_sum(self._total).item() / self._denominator
        norm = None if grad_norm is None else _as_float(grad_norm)
        if not math.isfinite(loss) or (norm is not None and not math.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(self.step, loss, norm)
        lr = _as_float(self.optimizer.param_groups[0]["lr"])
        return StepStats(loss=loss, num_tokens=self.num_tokens, grad_norm=norm, lr=lr)


def accumulate(
    batches: Iterable[Batch], grad_accum_steps: int, *, drop_last: bool = False
) -> Iterator[list[Batch]]:
    """Group consecutive batches into the micro-batch lists of optimizer steps.

    Args:
        batches: a dataloader or any iterable of collated batches.
        grad_accum_steps: micro-batches per optimizer step.
        drop_last: drop a final group shorter than ``grad_accum_steps``. By default it is kept:
            token-normalised accumulation makes a short group a correct, smaller step.

    Yields:
        Lists of ``grad_accum_steps`` batches (the last one possibly shorter).

    Raises:
        ValueError: if ``grad_accum_steps`` is not a positive int.
    """
    if isinstance(grad_accum_steps, bool) or not isinstance(grad_accum_steps, int) or grad_accum_steps < 1:
        raise ValueError(f"grad_accum_steps must be a positive int, got {grad_accum_steps!r}.")
    group: list[Batch] = []
    for batch in batches:
        group.append(batch)
        if len(group) == grad_accum_steps:
            yield group
            group = []
    if group and not drop_last:
        yield group


@torch.no_grad()
def eval_loss(
    model: nn.Module,
    loss_fn: LossFn,
    batches: Iterable[Batch],
    *,
    device: torch.device,
    max_batches: int | None = None,
) -> float:
    """Mean loss over every non-ignored token of a validation set, without gradients.

    The model is put in eval mode (no dropout) and its previous mode restored afterwards.

    Args:
        model: the model being trained.
        loss_fn: the training loss (the same call as in the recipes' step).
        batches: a dataloader or iterable of collated batches.
        device: where the model lives.
        max_batches: stop after this many batches; None reads them all.

    Returns:
        The token-mean loss.

    Raises:
        ValueError: if ``max_batches`` is negative, or no labelled token was seen.
    """
    if max_batches is not None and max_batches < 0:
        raise ValueError(f"eval_loss: max_batches must be >= 0 or None, got {max_batches}.")
    was_training = model.training
    model.eval()
    try:
        loss_total, num_tokens = 0.0, 0
        for i, batch in enumerate(batches):
            if max_batches is not None and i >= max_batches:
                break
            loss_sum, n = batch_loss(model, loss_fn, batch, device=device)
            totals = all_reduce_sum(
                torch.tensor([loss_sum.item(), n], dtype=torch.float64, device=loss_sum.device)
            )
            loss_total += totals[0].item()
            num_tokens += int(totals[1].item())
    finally:
        model.train(was_training)
        if isinstance(model, FSDPModule):
            model.reshard()  # no backward followed: free the root's gathered parameters
    if num_tokens == 0:
        raise ValueError(
            f"eval_loss saw no labelled tokens (max_batches={max_batches}). Check that the validation "
            "dataset is not empty and not fully masked, and that max_batches > 0."
        )
    return loss_total / num_tokens
