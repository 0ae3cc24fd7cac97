"""What a training run reports each step: loss, lr, tokens/s and peak memory, to the metric logger and the bar."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from ftune.runtime.rank import is_rank_zero, world_size
from ftune.training.run.cadence import every
from ftune.training.run.dtype_advice import say_pending_advice
from ftune.training.run.memory import peak_memory_gib
from ftune.training.run.progress import ProgressBar
from ftune.training.run.throughput import Throughput
from ftune.training.step.micro_batch import MicroBatch

logger = logging.getLogger(__name__)


def count_tokens(micro_batches: list[MicroBatch]) -> int:
    """Tokens the step processed (padding included: it costs compute), for tokens/s."""
    return sum(int(b.tokens.numel()) for b in micro_batches)


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
        # A set dtype's measured advice: said here, as the run is about to train, so that nothing the
        # run refuses while it sets up waits for the measurement (ftune.training.run.dtype_advice).
        say_pending_advice()
        self.metric_logger = metric_logger
        self.device = device
        self.every = log_every_n_steps
        self.throughput = Throughput(window=10)
        self.bar = ProgressBar(total, initial_step=initial, enabled=progress_bar)
        self.tokens = 0
        self.losses: list[float] = []
        self.last = time.perf_counter()  # the end of the last step (or validation pass)
        self.timings: dict[str, float] = {}  # add_timings', logged with the next step

    def add_timings(self, timings: dict[str, float]) -> None:
        """Seconds to log as they are with the next step (this rank's: a GRPO step's ``time/rollout_s``)."""
        self.timings.update(timings)

    def step(self, step: int, stats: Any, num_tokens: int) -> dict[str, float]:
        """Record one optimizer step (`num_tokens`: this rank's); returns what was logged (global figures)."""
        num_tokens *= world_size()  # every rank processes a batch of the same shape
        tps = self.throughput.update(num_tokens)
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
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
            "step_seconds": seconds,  # since the previous step or validation pass (saves included)
        }
        metrics.update(stats.metrics)
        metrics.update(self.timings)
        self.timings = {}
        if stats.grad_norm is not None:
            metrics["grad_norm"] = stats.grad_norm
        if peak is not None:
            metrics["peak_memory_gib"] = peak
            # On CUDA the allocator's own peaks too (the device's memory, apart from the host's RSS).
            metrics.update({k: v for k, v in mem.items() if k != "peak_rss_gib"})
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
        self.last = time.perf_counter()

    def close(self) -> None:
        self.bar.close()
        if self.metric_logger is not None:
            self.metric_logger.close()
