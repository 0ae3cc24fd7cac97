"""One optimizer step with token-normalised gradient accumulation, clipping and a non-finite guard.

Every recipe calls these the same way::

    for step, micro_batches in enumerate(training.accumulate(loader, s.grad_accum_steps), start=1):
        stats = training.train_step(model, loss_fn, micro_batches, optimizer, step=step, device=device,
                                    scheduler=scheduler, clip_grad_norm=s.clip_grad_norm)
"""

import logging
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from ftune.training.batch_loss import LossFn, batch_loss, check_batch, shift_labels
from ftune.training.fsdp import all_reduce_sum, world_size
from ftune.training.loss import IGNORE_INDEX
from ftune.training.optimizer_in_backward import OptimizerInBackward, check_optimizer_in_backward

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
    """

    loss: float
    num_tokens: int
    grad_norm: float | None
    lr: float


class NonFiniteError(RuntimeError):
    """The loss or the gradient norm was NaN or infinite; the optimizer step was not taken.

    Attributes:
        step: the step the caller passed to ``train_step``.
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


def _trainable(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]


def train_step(
    model: nn.Module,
    loss_fn: LossFn,
    micro_batches: list[Batch],
    optimizer: torch.optim.Optimizer,
    *,
    step: int,
    device: torch.device,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    clip_grad_norm: float | None = None,
) -> StepStats:
    """Forward and backward every micro-batch, then clip, check, and step the optimizer and scheduler.

    Gradients are token-normalised: the non-ignored (shifted) labels of all micro-batches are
    counted first, and each micro-batch backpropagates ``loss_sum / total_tokens``. The step's
    gradient is then that of the mean loss over all its tokens, whatever the split into
    micro-batches and however unequal their token counts (a mean of per-batch means is not).

    Args:
        model: in train mode; has ``hidden(tokens, *, input_pos, mask)`` and ``output_weight``.
        loss_fn: ``loss_fn(weight, hidden, shifted_labels) -> (loss_sum, num_tokens)``.
        micro_batches: collated batches (``tokens``, ``labels``, optionally ``input_pos`` and
            ``document_ids``) whose gradients make up this step.
        optimizer: a ``torch.optim.Optimizer``, or an ``OptimizerInBackward``.
        step: the number of this step, used in error messages.
        device: where the model lives; batches are moved there.
        scheduler: stepped once after the optimizer.
        clip_grad_norm: clip the total gradient norm to this value; None disables clipping.

    Returns:
        The step's :class:`StepStats`.

    Raises:
        NonFiniteError: if the loss or the gradient norm is not finite. The optimizer is not
            stepped and the gradients are cleared, so the weights stay those of the last good step.
        ValueError: if ``micro_batches`` is empty, ``clip_grad_norm`` is not positive, or the
            optimizer is an ``OptimizerInBackward`` and there is accumulation or clipping.
    """
    if not micro_batches:
        raise ValueError(f"train_step(step={step}) got no micro-batches; pass a non-empty list.")
    if clip_grad_norm is not None and not clip_grad_norm > 0:
        raise ValueError(f"clip_grad_norm must be > 0 or null (no clipping), got {clip_grad_norm}.")
    in_backward = isinstance(optimizer, OptimizerInBackward)
    if in_backward:
        check_optimizer_in_backward(grad_accum_steps=len(micro_batches), clip_grad_norm=clip_grad_norm)

    labels = []
    for batch in micro_batches:
        check_batch(batch)
        document_ids = batch["document_ids"].to(device) if "document_ids" in batch else None
        labels.append(shift_labels(batch["labels"].to(device, non_blocking=True), document_ids))
    # One sync for the whole step: the normaliser must be known before the first backward. With
    # several ranks it is the global count, and FSDP sums (not averages) the gradients, so the
    # step's gradient is that of the mean over every token of the global batch.
    local = sum((y != IGNORE_INDEX).sum() for y in labels)
    num_tokens = int(all_reduce_sum(torch.as_tensor(local, dtype=torch.int64, device=device)).item())
    if num_tokens == 0:
        logger.warning("Step %d has no labelled tokens; its gradient is zero.", step)
    denominator = max(num_tokens, 1)
    # FSDP averages gradients over ranks; scaling by the world size turns that average into the
    # sum of the ranks' shares of the global token mean (see ftune/training/fsdp.py).
    scale = world_size()

    try:
        loss_total = torch.zeros((), dtype=torch.float32, device=device)
        for batch, shifted in zip(micro_batches, labels):
            loss_sum, _ = batch_loss(model, loss_fn, batch, device=device, shifted_labels=shifted)
            if in_backward and not math.isfinite(loss_sum.item()):
                # The hooks update the weights during backward: check before it, not after.
                raise NonFiniteError(step, loss_sum.item() / denominator, None)
            (loss_sum * scale / denominator).backward()
            loss_total += loss_sum.detach()
        loss = all_reduce_sum(loss_total).item() / denominator

        grad_norm = None
        if clip_grad_norm is not None:
            # Returns the total norm before clipping, which is what is worth logging.
            grad_norm = _as_float(torch.nn.utils.clip_grad_norm_(_trainable(optimizer), clip_grad_norm))
        if not math.isfinite(loss) or (grad_norm is not None and not math.isfinite(grad_norm)):
            raise NonFiniteError(step, loss, grad_norm)
    except BaseException:
        optimizer.zero_grad(set_to_none=True)  # a caller that skips the step must not inherit these
        raise

    lr = _as_float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if scheduler is not None:
        scheduler.step()
    return StepStats(loss=loss, num_tokens=num_tokens, grad_norm=grad_norm, lr=lr)


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
        loss_fn: the training loss (same call as in ``train_step``).
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
