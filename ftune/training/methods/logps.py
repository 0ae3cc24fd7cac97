"""Log-probabilities of labelled tokens from final hidden states and the model's head, in chunks of tokens.

- :func:`sequence_logps`: per row, the summed ``log p(label)`` of its labelled tokens and their
  number (preference losses, ``ftune.training.DPOLoss``, compare whole answers);
- :func:`target_logps`: each labelled token's ``log p(label)`` (GRPO's ratio and KL), whose backward
  recomputes each block's logits instead of saving them.

Both take the model's output head (``model.head``: weight and soft-cap), so a soft-capped model
(Gemma 2) is scored on the logits it outputs. Only the labelled positions are projected to the
vocabulary, ``num_chunks`` contiguous blocks at a time, like ``ftune.training.ChunkedCrossEntropyLoss``:
neither pass holds the fp32 logits of more than one block.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ftune.modules.transformer import OutputHead
from ftune.training.step.loss import IGNORE_INDEX


def token_logps(head: OutputHead, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log p(label)`` of one block of tokens, in fp32.

    Args:
        head: the model's output head (``model.head``).
        hidden: hidden states of labelled positions, ``[tokens, dim]``.
        labels: their target ids, ``[tokens]`` (none ignored).

    Returns:
        ``[tokens]`` fp32 log-probabilities.
    """
    logits = head.logits(hidden)  # (tokens, vocab): upcast and capped per block
    return -F.cross_entropy(logits, labels, reduction="none")


def sequence_logps(
    head: OutputHead,
    hidden: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_chunks: int,
    chunk_fn=token_logps,
    document_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row (per document of a packed row): the summed log-probability of its labelled tokens, and their number.

    Args:
        head: the model's output head (``model.head``).
        hidden: final hidden states, ``[rows, s, dim]``.
        labels: targets aligned with ``hidden`` (already shifted), ``[rows, s]``, ``-100`` where ignored.
        num_chunks: number of contiguous blocks the labelled tokens are split into.
        chunk_fn: ``(head, hidden [n, dim], labels [n]) -> [n]`` log-probabilities of one block
            (a loss's compiled ``chunk_loss``, or :func:`token_logps`).
        document_ids: ``[1, s]`` long for one packed row whose documents are numbered 0, 1, ...
            in order (``ftune.data.padding_free_collate_preference``): the sums are then per document.

    Returns:
        ``(logps, counts)``: ``[rows]`` (or ``[documents]``) fp32 sums (0 without labels) and long counts.

    Raises:
        ValueError: if the shapes do not fit together or ``num_chunks`` is not positive.
    """
    weight = head.weight
    if hidden.dim() != 3 or labels.shape != hidden.shape[:2] or weight.shape[-1] != hidden.shape[-1]:
        raise ValueError(
            f"sequence_logps: expected head weight [vocab, dim], hidden [rows, s, dim] and labels [rows, s]; got "
            f"weight {list(weight.shape)}, hidden {list(hidden.shape)}, labels {list(labels.shape)}."
        )
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
        raise ValueError(f"sequence_logps: num_chunks must be a positive int, got {num_chunks!r}.")
    keep = labels != IGNORE_INDEX  # (rows, s)
    index = keep.reshape(-1).nonzero().squeeze(1)  # (n,) flat positions with a label
    if document_ids is None:
        rows = hidden.shape[0]
        row_of = torch.div(index, labels.shape[1], rounding_mode="floor")  # (n,)
        counts = keep.sum(dim=1)
    else:
        rows, doc = _documents(document_ids, labels)
        row_of = doc.index_select(0, index)  # (n,) each labelled token's document
        counts = torch.zeros(rows, dtype=torch.long, device=labels.device).index_add(
            0, doc, keep.reshape(-1).long()
        )
    flat_hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index)  # (n, dim), contiguous
    flat_labels = labels.reshape(-1).index_select(0, index)  # (n,)
    logps = hidden.new_zeros(rows, dtype=torch.float32)
    if index.numel():
        chunks = zip(flat_hidden.chunk(num_chunks), flat_labels.chunk(num_chunks), row_of.chunk(num_chunks))
        for h, y, r in chunks:
            logps = logps.index_add(0, r, chunk_fn(head, h, y))
    else:
        logps = logps + 0.0 * hidden.sum()  # keep a graph: an all-ignored batch has a zero gradient
    return logps, counts


def _documents(document_ids: torch.Tensor, labels: torch.Tensor) -> tuple[int, torch.Tensor]:
    """The number of documents of one packed row and each position's document (flat), checked."""
    if document_ids.shape != labels.shape or document_ids.shape[0] != 1:
        raise ValueError(
            f"sequence_logps: per-document sums need one packed row: document_ids [1, s] like labels; got "
            f"document_ids {list(document_ids.shape)}, labels {list(labels.shape)}."
        )
    doc = document_ids.reshape(-1)
    starts = torch.cat([doc.new_ones(1, dtype=torch.bool), doc[1:] != doc[:-1]])
    if not torch.equal(doc[starts], torch.arange(int(starts.sum()), device=doc.device)):
        raise ValueError(
            "sequence_logps: a packed row's documents must be numbered 0, 1, 2, ... in order, each in one run "
            "of positions (ftune.data.padding_free_collate_preference lays pairs out so)."
        )
    return int(starts.sum()), doc


class _TargetLogps(torch.autograd.Function):
    """``log softmax(cap(hidden @ weight.T))[label]`` per row, in row blocks; backward recomputes each block.

    With a soft-cap ``c = cap * tanh(z / cap)`` of the raw logits ``z``, ``dc/dz = 1 - (c / cap)^2``.
    """

    @staticmethod
    def forward(  # noqa: PLR0913 - autograd.Function takes its inputs positionally
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        num_chunks: int,
        softcap: float | None,
    ) -> torch.Tensor:
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        start = 0
        for h, y in zip(hidden.chunk(num_chunks), labels.chunk(num_chunks)):
            rows = slice(start, start + h.shape[0])
            start += h.shape[0]
            logits = _capped(h, weight, softcap)  # (tokens, vocab): the only block-sized buffer
            lse[rows] = torch.logsumexp(logits, dim=-1)
            out[rows] = logits.gather(1, y[:, None]).squeeze(1) - lse[rows]
            del logits
        # Saved: the inputs and one fp32 per token, never logits (they are recomputed in backward).
        ctx.save_for_backward(hidden, weight, labels, lse)
        ctx.num_chunks, ctx.softcap = num_chunks, softcap
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor):
        hidden, weight, labels, lse = ctx.saved_tensors
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
        )
        start, cap = 0, ctx.softcap
        for h, y in zip(hidden.chunk(ctx.num_chunks), labels.chunk(ctx.num_chunks)):
            rows = slice(start, start + h.shape[0])
            start += h.shape[0]
            g = grad_out[rows].float()
            logits = _capped(h, weight, cap)  # (tokens, vocab)
            # d log p(y) / d logits = one_hot(y) - softmax(logits), times the incoming gradient.
            grad = (logits - lse[rows, None]).exp_().mul_(-g[:, None])
            grad[torch.arange(grad.shape[0], device=grad.device), y] += g
            if cap is not None:  # through the cap: times 1 - (c / cap)^2
                grad.mul_(1.0 - (logits / cap) ** 2)
            del logits
            grad = grad.to(weight.dtype)
            if need_hidden:
                torch.mm(grad, weight, out=grad_hidden[rows])
            if need_weight:
                grad_weight += (grad.T @ h).float()
            del grad
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None


def _capped(hidden: torch.Tensor, weight: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """fp32 logits of one block, capped in place when the model caps them."""
    logits = (hidden @ weight.T).float()
    return logits if softcap is None else logits.div_(softcap).tanh_().mul_(softcap)


def target_logps(
    head: OutputHead, hidden: torch.Tensor, labels: torch.Tensor, *, num_chunks: int
) -> torch.Tensor:
    """Per-token ``log p(label)`` of final hidden states, without the full fp32 logits.

    Args:
        head: the model's output head (``model.head``: weight ``[vocab, dim]`` and soft-cap).
        hidden: final hidden states ``[b, t, dim]`` (of the positions that predict the completion).
        labels: ``[b, t]`` target ids aligned with ``hidden``, ``-100`` where there is none (padding).
        num_chunks: blocks the labelled positions are projected to the vocabulary in.

    Returns:
        ``[b, t]`` fp32, 0 where the label is ``-100``; differentiable in ``hidden`` and the weight.

    Raises:
        ValueError: if the shapes do not fit together or ``num_chunks`` is not a positive int.
    """
    weight = head.weight
    if hidden.dim() != 3 or labels.shape != hidden.shape[:2] or weight.shape[-1] != hidden.shape[-1]:
        raise ValueError(
            f"token_logps: expected head weight [vocab, dim], hidden [b, t, dim] and labels [b, t]; got "
            f"weight {list(weight.shape)}, hidden {list(hidden.shape)}, labels {list(labels.shape)}."
        )
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
        raise ValueError(f"token_logps: num_chunks must be a positive int, got {num_chunks!r}.")
    index = (labels != IGNORE_INDEX).reshape(-1).nonzero().squeeze(1)  # (n,) flat labelled positions
    out = hidden.new_zeros(labels.numel(), dtype=torch.float32)
    if not index.numel():
        return (out + 0.0 * hidden.sum()).view_as(labels)  # keep a graph: a zero gradient
    flat_hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index)  # (n, dim), contiguous
    flat_labels = labels.reshape(-1).index_select(0, index)
    logps = _TargetLogps.apply(flat_hidden, weight, flat_labels, num_chunks, head.softcap)
    return out.index_copy(0, index, logps).view_as(labels)
