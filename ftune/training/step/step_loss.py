"""The parts of a training step that must behave the same in every recipe.

The step itself (forward, backward, clipping, optimizer and scheduler) is written in each recipe,
where people change it. What is easy to get subtly wrong lives here and is called the same way
everywhere: grouping micro-batches on the device (:func:`accumulate`), normalised accumulation and
the non-finite guard (:class:`StepLoss`), and validation (:func:`validate`). What differs between
recipe kinds is the recipe's own ``loss_on(batch) -> Loss`` (the forward and the loss): the step and
validation both call it, so an edited forward changes both.
"""

import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from ftune.runtime.rank import world_size
from ftune.settings import check_optimizer_in_backward
from ftune.training.features.fsdp import all_reduce_sum
from ftune.training.features.optimizer_in_backward import OptimizerInBackward
from ftune.training.step.metric import Loss, Metric, add_metrics, reduce_metrics
from ftune.training.step.micro_batch import MicroBatch, on_device, per_token

logger = logging.getLogger(__name__)

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class StepStats:
    """What one optimizer step did.

    Attributes:
        loss: mean loss of the step: its summed loss over every micro-batch and rank, divided by
            the step's count (labelled tokens, or pairs for DPO: ``StepLoss(per=...)``).
        num_tokens: the step's labelled tokens (those trained on).
        grad_norm: total gradient norm before clipping; None when clipping is off.
        lr: learning rate of the first param group used for this step (before the scheduler moved it).
        metrics: the values of the step's metrics (``Loss.metrics``, each over its own count: DPO's
            rewards, GRPO's KL and rewards, an MoE's aux loss); empty for a dense model's SFT.
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

    # The message says what happened and what to change: the CLI prints it without a traceback
    # (ftune.config.run.is_user_error), like a config error.
    user_facing = True

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
    """The normalised loss of one optimizer step, and the non-finite guard that ends it.

    The recipe writes the step itself (forward, backward, clipping, optimizer and scheduler); this
    object holds what is easy to get subtly wrong. It counts the step's units (``per``: labelled
    tokens, or pairs for DPO) over every micro-batch and rank first, so that each micro-batch
    backpropagates ``loss_sum / total``: the step's gradient is that of the mean loss over all its
    units, whatever the split into micro-batches and however unequal their counts (a mean of
    per-batch means is not). ::

        step_loss = training.StepLoss(micro_batches, optimizer, step=step, device=device, per=training.per_token)
        for batch in micro_batches:
            step_loss.scaled(loss_on(batch)).backward()
        stats = step_loss.finish(grad_norm)  # raises NonFiniteError (gradients cleared) if not finite
        optimizer.step()

    Args:
        micro_batches: the step's batches, on the device (:func:`accumulate` yields them).
        optimizer: the step's optimizer (read for its learning rate; cleared on a non-finite step).
            With an ``OptimizerInBackward`` the weights change during backward, so the loss is
            checked before each backward instead of after.
        step: the number of this step, used in messages.
        device: where the model lives.
        per: what the step's loss is a mean over: ``training.per_token`` or ``training.per_pair``.

    Raises:
        ValueError: if ``micro_batches`` is empty, or several micro-batches meet an optimizer that
            steps inside backward.
    """

    def __init__(
        self,
        micro_batches: list[MicroBatch],
        optimizer: torch.optim.Optimizer,
        *,
        step: int,
        device: torch.device,
        per: Callable[[MicroBatch], torch.Tensor],
    ) -> None:
        if not micro_batches:
            raise ValueError(f"StepLoss(step={step}) got no micro-batches; pass a non-empty list.")
        self.optimizer, self.step, self.device = optimizer, step, device
        self.in_backward = isinstance(optimizer, OptimizerInBackward)
        if self.in_backward:
            check_optimizer_in_backward(grad_accum_steps=len(micro_batches), clip_grad_norm=None)
        local = torch.zeros(2, dtype=torch.int64, device=device)  # labelled tokens, units
        for batch in micro_batches:
            local[0] += per_token(batch)
            local[1] += per(batch)
        # One sync for the whole step: the normaliser must be known before the first backward. With
        # several ranks it is the global count, and FSDP sums (not averages) the gradients, so the
        # step's gradient is that of the mean over every unit of the global batch.
        self.num_tokens, units = (int(n) for n in all_reduce_sum(local).tolist())
        if units == 0:
            logger.warning("Step %d has no labelled tokens; its gradient is zero.", step)
        self.denominator = max(units, 1)
        # FSDP averages gradients over ranks; scaling by the world size turns that average into the
        # sum of the ranks' shares of the global mean (see ftune/training/features/fsdp.py).
        self.scale = world_size() / self.denominator
        self.total = torch.zeros((), dtype=torch.float32, device=device)
        self.metrics: dict[str, Metric] = {}

    def scaled(self, loss: Loss) -> torch.Tensor:
        """Record a micro-batch's :class:`Loss`; return the tensor to call ``.backward()`` on."""
        if self.in_backward and not math.isfinite(loss.sum.item()):
            # The hooks update the weights during backward: check before it, not after.
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(self.step, loss.sum.item() / self.denominator, None)
        self.total += loss.sum.detach().float()
        add_metrics(self.metrics, loss.metrics)
        return loss.sum * self.scale

    def finish(self, grad_norm: torch.Tensor | float | None = None) -> StepStats:
        """The step's mean loss (and metrics) over every rank; raise before the optimizer steps if anything
        is not finite.

        Args:
            grad_norm: the pre-clip total gradient norm (what ``clip_grad_norm_`` returns), or None.

        Returns:
            The step's :class:`StepStats` (the learning rate is the one the optimizer is about to use).

        Raises:
            NonFiniteError: if the loss or the gradient norm is NaN or infinite. The gradients are
                cleared first, so a caller that skips the step inherits nothing.
        """
        loss = float(all_reduce_sum(self.total.clone())) / self.denominator
        norm = None if grad_norm is None else _as_float(grad_norm)
        if not math.isfinite(loss) or (norm is not None and not math.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(self.step, loss, norm)
        lr = _as_float(self.optimizer.param_groups[0]["lr"])
        metrics = reduce_metrics(self.metrics, self.device)
        return StepStats(loss=loss, num_tokens=self.num_tokens, grad_norm=norm, lr=lr, metrics=metrics)


def accumulate(
    batches: Iterable[Batch], grad_accum_steps: int, *, device: torch.device, drop_last: bool = False
) -> Iterator[list[MicroBatch]]:
    """Group consecutive batches into the micro-batch lists of optimizer steps, each on ``device``.

    Args:
        batches: a dataloader or any iterable of collated batches.
        grad_accum_steps: micro-batches per optimizer step.
        device: where the model lives: each batch is moved there and its labels shifted, once
            (:func:`ftune.training.on_device`).
        drop_last: drop a final group shorter than ``grad_accum_steps``. By default it is kept:
            token-normalised accumulation makes a short group a correct, smaller step.

    Yields:
        Lists of ``grad_accum_steps`` :class:`MicroBatch` (the last one possibly shorter).

    Raises:
        ValueError: if ``grad_accum_steps`` is not a positive int.
    """
    if isinstance(grad_accum_steps, bool) or not isinstance(grad_accum_steps, int) or grad_accum_steps < 1:
        raise ValueError(f"grad_accum_steps must be a positive int, got {grad_accum_steps!r}.")
    group: list[MicroBatch] = []
    for batch in batches:
        group.append(on_device(batch, device))
        if len(group) == grad_accum_steps:
            yield group
            group = []
    if group and not drop_last:
        yield group


@torch.no_grad()
def validate(
    loss_on: Callable[[MicroBatch], Loss],
    model: nn.Module,
    batches: Iterable[Batch],
    *,
    device: torch.device,
    max_batches: int | None,
) -> dict[str, float]:
    """The recipe's own loss over a validation set, without gradients: what the step computes, held out.

    ``loss_on`` is the function the training step calls, so an edited forward or loss changes
    validation with it. The model is put in eval mode (no dropout) and its previous mode restored
    afterwards. The sums are all-reduced over ranks: every rank reads the same batches
    (``training.validation_loader``), so the figures are the same at any world size.

    Args:
        loss_on: the recipe's ``loss_on(batch) -> Loss``.
        model: the model being trained (its mode is switched; an FSDP2 root is resharded after).
        batches: a dataloader or iterable of collated batches.
        device: where the model lives.
        max_batches: stop after this many batches; None reads them all.

    Returns:
        ``{"val_loss": sum / count, "val_<metric>": its value, ...}`` over the batches read (each metric over
        its own count, as in a training step).

    Raises:
        ValueError: if ``max_batches`` is negative, or the batches held nothing to count.
    """
    if max_batches is not None and max_batches < 0:
        raise ValueError(f"validate: max_batches must be >= 0 or None, got {max_batches}.")
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # the loss's sum and its count
    metrics: dict[str, Metric] = {}
    try:
        for i, batch in enumerate(batches):
            if max_batches is not None and i >= max_batches:
                break
            loss = loss_on(on_device(batch, device))
            count = torch.tensor(float(loss.count), dtype=torch.float64, device=device)
            total += torch.stack([loss.sum.detach().to(device, torch.float64), count])
            add_metrics(metrics, loss.metrics)
        loss_sum, count = all_reduce_sum(total).tolist()
        figures = reduce_metrics(metrics, device)
    finally:
        model.train(was_training)
        if isinstance(model, FSDPModule):
            model.reshard()  # no backward followed: free the root's gathered parameters
    if count == 0:
        raise ValueError(
            f"validation counted nothing to average (max_batches={max_batches}): no labelled token or "
            "pair. Check that dataset_val is not empty and not fully masked, and that max_val_batches "
            "is null or >= 1."
        )
    return {"val_loss": loss_sum / count, **{f"val_{key}": value for key, value in figures.items()}}
