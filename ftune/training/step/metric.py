"""A logged figure as sums with its own count: added over micro-batches and ranks, divided once.

    Metric.mean(values)            # the mean of the values added (their sum, their count)
    Metric.ratio(part, whole)      # a ratio of two sums (clipped tokens / tokens)
    Metric.std(values)             # the sample std of every value added (sum, sum of squares, count)
    Metric.max(values)             # the largest value added
    Metric.min(values)             # the smallest value added

A loss helper returns its loss as a :class:`Loss` and its figures as metrics (``Loss.metrics``); ``StepLoss`` and ``validate`` add
them (``+``), sum them over ranks (:func:`reduce_metrics`) and read each one's value at the end. So no
figure is divided by another's count, and no step has to undo a division to log a mean of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

from ftune.training.features.fsdp import all_reduce_max, all_reduce_sum

Kind = Literal["mean", "std", "max", "min"]
EXTREMES = ("max", "min")


class Loss(NamedTuple):
    """What a recipe's ``loss_on(batch)`` returns.

    Attributes:
        sum: the micro-batch's summed loss (a scalar with a graph during training).
        count: what the sum is over: the count the step divides by (``StepLoss(per=...)``: labelled
            tokens, pairs, sequences, ...) of this micro-batch; validation divides by it.
        metrics: further figures to log, each with its own count (:class:`Metric`).
    """

    sum: torch.Tensor
    count: int
    metrics: dict[str, Metric]


@dataclass(frozen=True)
class Metric:
    """Sums that make one logged figure.

    Attributes:
        kind: "mean" (``total / count``), "std" (the sample std, from ``total``, ``squares`` and
            ``count``), "max" or "min" (``total`` is the largest or smallest value; ``count`` how many
            were seen).
        total: the sum of the values (the extreme for "max" and "min"), a detached fp32 scalar.
        count: how many values (or the whole a ratio is of), a detached fp32 scalar.
        squares: the sum of the squared values ("std" only).
    """

    kind: Kind
    total: torch.Tensor
    count: torch.Tensor
    squares: torch.Tensor | None = None

    @classmethod
    def mean(cls, values: torch.Tensor) -> Metric:
        values = values.detach().float()
        return cls("mean", values.sum(), torch.tensor(float(values.numel()), device=values.device))

    @classmethod
    def ratio(cls, part: torch.Tensor | float, whole: torch.Tensor | float) -> Metric:
        part = torch.as_tensor(part).detach().float()
        return cls("mean", part, torch.as_tensor(whole, device=part.device).detach().float())

    @classmethod
    def std(cls, values: torch.Tensor) -> Metric:
        values = values.detach().float()
        count = torch.tensor(float(values.numel()), device=values.device)
        return cls("std", values.sum(), count, (values * values).sum())

    @classmethod
    def max(cls, values: torch.Tensor) -> Metric:
        values = values.detach().float()
        return cls("max", values.max(), torch.tensor(float(values.numel()), device=values.device))

    @classmethod
    def min(cls, values: torch.Tensor) -> Metric:
        values = values.detach().float()
        return cls("min", values.min(), torch.tensor(float(values.numel()), device=values.device))

    def __add__(self, other: Metric) -> Metric:
        if other.kind != self.kind:
            raise ValueError(f"Metric: cannot add a {other.kind!r} metric to a {self.kind!r} one.")
        if self.kind in EXTREMES:
            total = (torch.maximum if self.kind == "max" else torch.minimum)(self.total, other.total)
        else:
            total = self.total + other.total
        squares = None if self.squares is None else self.squares + other.squares
        return Metric(self.kind, total, self.count + other.count, squares)

    def value(self) -> float:
        """The figure: the mean, the sample std (0 with fewer than two values), the maximum or the minimum."""
        count = float(self.count)
        if self.kind in EXTREMES:
            return float(self.total)
        if self.kind == "mean":
            return float(self.total) / count if count else 0.0
        if count < 2:
            return 0.0
        mean = float(self.total) / count
        return math.sqrt(max(float(self.squares) / count - mean * mean, 0.0) * count / (count - 1))


def add_metrics(into: dict[str, Metric], metrics: dict[str, Metric]) -> None:
    """Add ``metrics`` into ``into`` key by key (a key seen first is taken as it is)."""
    for key, metric in metrics.items():
        into[key] = metric if key not in into else into[key] + metric


def reduce_metrics(metrics: dict[str, Metric], device: torch.device) -> dict[str, float]:
    """Each metric summed over every rank (maxima: the largest, minima: the smallest), then its value: one
    sync for the sums, one for the extremes."""
    keys = sorted(metrics)
    summed = [k for k in keys if metrics[k].kind not in EXTREMES]
    largest = [k for k in keys if metrics[k].kind in EXTREMES]
    out: dict[str, float] = {}
    if summed:
        rows = [(metrics[k].total, metrics[k].count, _squares(metrics[k])) for k in summed]
        flat = torch.stack([t.to(device, torch.float64) for row in rows for t in row])
        totals = all_reduce_sum(flat).view(len(summed), 3).tolist()
        for key, (total, count, squares) in zip(summed, totals):
            kind = metrics[key].kind
            out[key] = Metric(kind, torch.tensor(total), torch.tensor(count), torch.tensor(squares)).value()
    if largest:
        # A minimum is the negated maximum of the negated values: one all-reduce for both kinds.
        sign = {k: -1.0 if metrics[k].kind == "min" else 1.0 for k in largest}
        top = all_reduce_max(
            torch.stack([sign[k] * metrics[k].total.to(device, torch.float64) for k in largest])
        )
        out.update((k, sign[k] * v) for k, v in zip(largest, top.tolist()))
    return {k: out[k] for k in keys}


def _squares(metric: Metric) -> torch.Tensor:
    return metric.squares if metric.squares is not None else torch.zeros_like(metric.total)
