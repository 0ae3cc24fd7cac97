"""Run-level pieces of the training loop that every recipe shares: step budget, cadence, collate, reporting."""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import Any

import torch

from ftune.config import instantiate
from ftune.data.collate import padded_collate_sft
from ftune.runtime.rank import is_rank_zero, world_size
from ftune.training.memory import peak_memory_gib
from ftune.training.progress import ProgressBar
from ftune.training.throughput import Throughput

logger = logging.getLogger(__name__)


def total_steps(*, max_steps: int | None, epochs: int, batches_per_epoch: int, grad_accum_steps: int) -> int:
    """Optimizer steps in the run: `max_steps` when set, else every batch of `epochs` epochs.

    Raises:
        ValueError: when the run would have no step (names the settings that make it so).
    """
    per_epoch = math.ceil(batches_per_epoch / grad_accum_steps)
    steps = max_steps if max_steps is not None else epochs * per_epoch
    if steps < 1 or per_epoch < 1:
        raise ValueError(
            f"the run has no optimizer step: max_steps={max_steps}, epochs={epochs}, "
            f"{batches_per_epoch} batches per epoch. Use a larger dataset, a smaller batch_size, or max_steps >= 1."
        )
    return steps


def every(step: int, n: int | None) -> bool:
    """True when a `*_every_n_steps` setting of `n` fires at `step` (None: never)."""
    return n is not None and n > 0 and step % n == 0


def every_after(step: int, n: int | None) -> bool:
    """True once `step` steps are done and `n` is reached: ``fake_quant_after_n_steps`` (None: from the start)."""
    return n is None or step >= n


def build_collate(node: Any, pad_id: int) -> Any:
    """The collate function: the config's ``collate_fn`` (a `_partial_` component taking the batch),
    or right padding with the tokenizer's pad id (packed samples are stacked as they are)."""
    if node is None:
        return partial(padded_collate_sft, pad_id=pad_id)
    return instantiate(node, _path="collate_fn")


def count_tokens(micro_batches: list[dict[str, torch.Tensor]]) -> int:
    """Tokens the step processed (padding included: it costs compute), for tokens/s."""
    return sum(int(b["tokens"].numel()) for b in micro_batches)


class Reporter:
    """Logs each step's numbers to the metric logger and the progress bar, with tokens/s and peak memory.

    Args:
        metric_logger: a `MetricLogger` component, or None for stdout only through the bar.
        total: steps in the run. initial: steps already done (resume).
        device: for peak-memory figures. log_every_n_steps: metric logger cadence.
        progress_bar: show the tqdm bar.
    """

    def __init__(
        self,
        metric_logger: Any,
        *,
        total: int,
        initial: int,
        device: torch.device,
        log_every_n_steps: int = 1,
        progress_bar: bool = True,
    ) -> None:
        self.metric_logger = metric_logger
        self.device = device
        self.every = log_every_n_steps
        self.throughput = Throughput(window=10)
        self.bar = ProgressBar(total, initial_step=initial, enabled=progress_bar)
        self.tokens = 0
        self.losses: list[float] = []

    def step(self, step: int, stats: Any, num_tokens: int) -> dict[str, float]:
        """Record one optimizer step (`num_tokens`: this rank's); returns what was logged (global figures)."""
        num_tokens *= world_size()  # every rank processes a batch of the same shape
        tps = self.throughput.update(num_tokens)
        self.tokens += num_tokens
        self.losses.append(stats.loss)
        mem = peak_memory_gib(self.device)
        peak = max(mem.values()) if mem else None
        metrics = {
            "loss": stats.loss,
            "lr": stats.lr,
            "tokens_per_second": tps,
            "tokens": num_tokens,  # processed, padding included
            "tokens_trained": stats.num_tokens,  # with a label
        }
        if stats.grad_norm is not None:
            metrics["grad_norm"] = stats.grad_norm
        if peak is not None:
            metrics["peak_memory_gib"] = peak
        self.bar.update(step, loss=stats.loss, lr=stats.lr, tokens_per_second=tps, peak_memory_gib=peak)
        if self.metric_logger is not None and every(step, self.every):
            self.metric_logger.log_dict(metrics, step)
        return metrics

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Log extra metrics (validation loss) and restart the throughput window."""
        if self.metric_logger is not None:
            self.metric_logger.log_dict(metrics, step)
        if is_rank_zero():
            logger.info("step %d: %s", step, ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        self.throughput.reset()

    def close(self) -> None:
        self.bar.close()
        if self.metric_logger is not None:
            self.metric_logger.close()


def build_optimizer(
    node: Any, params: list[torch.nn.Parameter], *, in_backward: bool
) -> torch.optim.Optimizer:
    """The config's optimizer over `params`, or one optimizer per parameter stepped inside backward."""
    if not in_backward:
        return instantiate(node, params, _path="optimizer")
    if world_size() > 1:
        raise ValueError(
            "optimizer_in_backward=True is not supported with several ranks: FSDP reduces the gradients "
            "after backward, so stepping inside backward would use unreduced gradients. Set "
            "optimizer_in_backward=false (or run the single-device recipe)."
        )
    from ftune.training.optimizer_in_backward import OptimizerInBackward

    return OptimizerInBackward(params, lambda group: instantiate(node, group, _path="optimizer"))


def validation_loader(dataset: Any, *, batch_size: int, collate_fn: Any) -> Any:
    """A plain, unshuffled loader for validation: every evaluation reads the same first batches."""
    if dataset is None:
        return None
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_fn)
