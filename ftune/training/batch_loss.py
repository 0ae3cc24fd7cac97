"""Turn one collated batch into a loss: shift the labels, build the packed-sequence mask, run the model.

This is the one place that knows the batch layout (``tokens``, ``labels``, and for packed
batches ``input_pos`` and ``document_ids``), so training and validation compute the same loss.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ftune.modules.masks import document_causal_mask
from ftune.training.loss import IGNORE_INDEX

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, int]]


def shift_labels(labels: torch.Tensor, document_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Align labels with the positions that predict them: ``out[:, t] = labels[:, t + 1]``.

    The hidden state at position ``t`` predicts token ``t + 1``. Shifting the labels (not the
    hidden states) keeps ``hidden`` contiguous; the last position gets the ignore index.

    Args:
        labels: ``[b, s]`` long, aligned with the tokens, ``-100`` where ignored.
        document_ids: ``[b, s]`` long for packed batches. Where position ``t + 1`` starts a new
            document, ``out[:, t]`` is ignored: a document's first token cannot be predicted from
            another document, so a packed batch trains on exactly the tokens the unpacked ones do.

    Returns:
        ``[b, s]`` long, the shifted labels.
    """
    ignore = labels.new_full((labels.shape[0], 1), IGNORE_INDEX)
    shifted = torch.cat([labels[:, 1:], ignore], dim=1)  # (b, s)
    if document_ids is not None:
        boundary = document_ids[:, 1:] != document_ids[:, :-1]  # (b, s - 1)
        shifted[:, :-1] = shifted[:, :-1].masked_fill(boundary, IGNORE_INDEX)
    return shifted


def labelled_positions(
    hidden: torch.Tensor, labels: torch.Tensor, ignore_index: int = IGNORE_INDEX
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep only the positions that have a label: ``[b, s, dim], [b, s] -> [1, n, dim], [1, n]``.

    An ignored position adds nothing to a token loss or to its gradients, yet projecting it to the
    vocabulary is the largest matmul of a small model (SmolLM2-135M: 28M of its 134M multiply-adds
    a token, forward) and its log-softmax the largest element-wise op. With prompts masked, most
    positions are ignored (the demo data trains on 384 of 2048 tokens a step), so dropping them
    before the projection saves most of that work and most of the logits' memory.

    Args:
        hidden: final hidden states ``[b, s, dim]``.
        labels: shifted labels ``[b, s]``, ``ignore_index`` where ignored.
        ignore_index: the label value of ignored positions.

    Returns:
        The labelled rows of ``hidden`` and their labels, in order, as one row of ``n`` tokens. When
        every position, or none, has a label, the inputs are returned unchanged (nothing to save,
        or nothing to keep: an all-ignored batch still gets a zero loss with a graph).
    """
    keep = (labels != ignore_index).reshape(-1)  # (b*s,)
    index = keep.nonzero().squeeze(1)  # (n,)
    if index.numel() in (0, keep.numel()):
        return hidden, labels
    rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index)  # (n, dim), contiguous
    return rows[None], labels.reshape(-1).index_select(0, index)[None]


def check_batch(batch: dict[str, Any]) -> None:
    """Check a collated batch has ``tokens`` and ``labels`` of one ``[b, s]`` shape.

    Args:
        batch: a collated batch.

    Raises:
        KeyError: if ``tokens`` or ``labels`` is missing.
        ValueError: if their shapes differ.
    """
    missing = [k for k in ("tokens", "labels") if k not in batch]
    if missing:
        raise KeyError(
            f"Batch is missing {missing}; it has keys {sorted(batch)}. A collated batch needs 'tokens' and "
            "'labels' ([b, s] long), plus 'input_pos' and 'document_ids' when packed."
        )
    if batch["tokens"].shape != batch["labels"].shape:
        raise ValueError(
            f"Batch 'tokens' {list(batch['tokens'].shape)} and 'labels' {list(batch['labels'].shape)} "
            "must have the same [b, s] shape."
        )


def batch_loss(
    model: nn.Module,
    loss_fn: LossFn,
    batch: dict[str, torch.Tensor],
    *,
    device: torch.device,
    shifted_labels: torch.Tensor | None = None,
) -> tuple[torch.Tensor, int]:
    """Forward one batch and return its summed token loss.

    Args:
        model: a decoder with ``hidden(tokens, *, input_pos, mask)`` and ``output_weight``.
        loss_fn: called as ``loss_fn(model.output_weight, hidden, shifted_labels)``.
        batch: ``tokens`` and ``labels`` ``[b, s]`` long, optionally ``input_pos`` and ``document_ids``.
        device: where the model lives; the batch is moved there.
        shifted_labels: the output of :func:`shift_labels` on ``device``, if the caller already has it.

    Returns:
        ``(loss_sum, num_tokens)`` as returned by ``loss_fn``. A loss whose ``token_wise``
        attribute is True (ftune's cross-entropy losses) gets only the labelled positions, as
        ``[1, n, dim]`` and ``[1, n]`` (see :func:`labelled_positions`).

    Raises:
        KeyError: if ``tokens`` or ``labels`` is missing.
        ValueError: if their shapes differ.
    """
    check_batch(batch)
    tokens = batch["tokens"].to(device, non_blocking=True)
    input_pos = batch["input_pos"].to(device, non_blocking=True) if "input_pos" in batch else None
    document_ids = batch["document_ids"].to(device, non_blocking=True) if "document_ids" in batch else None
    if shifted_labels is None:
        shifted_labels = shift_labels(batch["labels"].to(device, non_blocking=True), document_ids)
    mask = packed_mask(document_ids) if document_ids is not None else None
    hidden = model.hidden(tokens, input_pos=input_pos, mask=mask)  # (b, s, dim)
    if getattr(loss_fn, "token_wise", False):
        ignore_index = getattr(loss_fn, "ignore_index", IGNORE_INDEX)
        hidden, shifted_labels = labelled_positions(hidden, shifted_labels, ignore_index)
    return loss_fn(model.output_weight, hidden, shifted_labels)


def packed_mask(document_ids: torch.Tensor) -> torch.Tensor | None:
    """The attention mask of a packed batch, built once for all layers; None when plain causal will do.

    When every row holds a single document, the document mask equals the causal mask, and None
    lets attention take its causal path (no ``[b, s, s]`` mask; on GPU, the flash kernels).

    Args:
        document_ids: ``[b, s]`` document index of each position.

    Returns:
        ``document_causal_mask(document_ids)``, or None when it is the causal mask.
    """
    if bool((document_ids == document_ids[:, :1]).all()):
        return None
    return document_causal_mask(document_ids)
