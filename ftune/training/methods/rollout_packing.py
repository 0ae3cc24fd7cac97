"""A GRPO update without padding: a rollout's rows laid end to end in one row, and the loss's rows back.

A rollout's training batch holds one right-padded row per completion (prompt + completion, or a
multi-turn trajectory); with completions of unequal lengths a large share of the positions the
policy forward, the reference forward and the old-policy forward compute is padding.
:func:`pack_rows` lays each row's real tokens end to end in one row of ``n`` positions, with
``input_pos`` (each document's positions restart at 0, as in its padded row) and ``document_ids``
(rows numbered 0, 1, ... in order): the forwards then attend within each document only
(``ftune.training.MicroBatch.mask``) and compute no padding. A row's real tokens run up to its last
labelled token (:func:`ftune.training.step.micro_batch.real_tokens`: what follows it changes no
trained log-probability, the attention being causal).

The loss compares tokens within a completion (grpo's per-sequence mean) and weights them by their
completion's advantage, so :func:`rows_of` maps every per-position tensor of the packed row (the
policy's, old and reference log-probabilities, importance weights, labels) back to ``[rows, width]``,
each document at its own row and positions: the loss then runs on the padded layout it was written
for, and the mapping is an index copy, differentiable, so the gradients reach the packed forward.
"""

from __future__ import annotations

import torch

from ftune.training.step.loss import IGNORE_INDEX
from ftune.training.step.micro_batch import MicroBatch

# The keys of a rollout's training batch that are laid out per position ([rows, width]).
_PER_POSITION = ("tokens", "labels", "old_logps")


def row_lengths(labels: torch.Tensor) -> torch.Tensor:
    """``[rows]`` long: each row's real length, up to and including its last labelled token (the whole
    row when it has no label: nothing tells its padding apart)."""
    positions = torch.arange(labels.shape[1], device=labels.device)
    last = torch.where(labels != IGNORE_INDEX, positions, -1).amax(dim=1)  # (rows,)
    return torch.where(last < 0, labels.shape[1], last + 1)


def pack_rows(parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A rollout's right-padded training batch as one row: its rows' real tokens end to end.

    Args:
        parts: ``Rollout.training_batch()`` or ``Trajectories.training_batch()``: ``tokens``, ``labels``
            (aligned with the tokens, not shifted) and ``old_logps``, each ``[rows, width]``.

    Returns:
        The same keys, each ``[1, n]``, plus ``input_pos`` ``[1, n]`` (0, 1, ... in each row) and
        ``document_ids`` ``[1, n]`` (the row each position comes from: 0, 1, ..., in order).

    Raises:
        ValueError: a key is missing, the shapes differ, or the batch holds what one row cannot carry
            (images: their rows would have to be renumbered; not done yet).
    """
    unknown = sorted(set(parts) - set(_PER_POSITION))
    if unknown:
        raise ValueError(
            f"padding_free: a rollout's training batch with {unknown} cannot be laid end to end yet (only "
            f"{list(_PER_POSITION)} are packed: an image batch's rows would need renumbering); set "
            "padding_free=false for this run."
        )
    missing = [k for k in _PER_POSITION if k not in parts]
    shapes = {k: list(parts[k].shape) for k in _PER_POSITION if k in parts}
    if missing or parts["tokens"].dim() != 2 or len({str(s) for s in shapes.values()}) != 1:
        raise ValueError(
            f"pack_rows: expected a rollout's training batch with {list(_PER_POSITION)} of one shape [rows, "
            f"width]; missing {missing}, shapes {shapes}."
        )
    labels = parts["labels"]
    lengths = row_lengths(labels)  # (rows,)
    positions = torch.arange(labels.shape[1], device=labels.device)
    keep = positions[None, :] < lengths[:, None]  # (rows, width): the real tokens, row by row
    out = {k: parts[k][keep][None] for k in _PER_POSITION}  # (1, n): boolean indexing reads row-major
    rows = torch.arange(labels.shape[0], device=labels.device)
    out["input_pos"] = positions.expand_as(labels)[keep][None]
    out["document_ids"] = rows[:, None].expand_as(labels)[keep][None]
    return out


def rows_of(batch: MicroBatch, *values: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """Per-position tensors of a packed batch, each back at its document's row: ``[1, n] -> [rows, width]``.

    Args:
        batch: the packed micro-batch (its ``input_pos`` and ``document_ids`` say where each position goes).
        values: ``[1, n]`` tensors (or None, passed through): labels go back with ``-100`` around them,
            any other tensor with 0.

    Returns:
        The tensors ``[rows, width]`` in order, ``width`` the longest document; a float tensor keeps its
        graph (an index copy).
    """
    rows = int(batch.document_ids[0, -1]) + 1  # documents are numbered 0, 1, ... in order
    width = int(batch.input_pos.max()) + 1
    index = (batch.document_ids * width + batch.input_pos).reshape(-1)  # (n,) flat [rows, width] positions
    out = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        fill = IGNORE_INDEX if value.dtype == torch.long else 0
        flat = value.new_full((rows * width,), fill).index_copy(0, index, value.reshape(-1))
        out.append(flat.view(rows, width))
    return tuple(out)
