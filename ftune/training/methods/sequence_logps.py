"""Log-probability of each sequence's labelled tokens, computed in chunks of tokens.

Preference losses (``ftune.training.DPOLoss``) compare whole answers: they need, per row of a
batch, the sum of ``log p(label)`` over the row's labelled tokens and how many there are. Only the
labelled positions are projected to the vocabulary, ``num_chunks`` contiguous blocks at a time,
like ``ftune.training.ChunkedCrossEntropyLoss``: the forward pass never holds the fp32 logits of
more than one block.
"""

import torch
import torch.nn.functional as F

from ftune.training.step.loss import IGNORE_INDEX


def token_logps(weight: torch.Tensor, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log p(label)`` of one block of tokens, in fp32.

    Args:
        weight: output projection weight, ``[vocab, dim]``.
        hidden: hidden states of labelled positions, ``[tokens, dim]``.
        labels: their target ids, ``[tokens]`` (none ignored).

    Returns:
        ``[tokens]`` fp32 log-probabilities.
    """
    logits = F.linear(hidden, weight).float()  # (tokens, vocab): upcast per block
    return -F.cross_entropy(logits, labels, reduction="none")


def sequence_logps(
    weight: torch.Tensor,
    hidden: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_chunks: int,
    chunk_fn=token_logps,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: the summed log-probability of its labelled tokens, and their number.

    Args:
        weight: output projection weight, ``[vocab, dim]``.
        hidden: final hidden states, ``[rows, s, dim]``.
        labels: targets aligned with ``hidden`` (already shifted), ``[rows, s]``, ``-100`` where ignored.
        num_chunks: number of contiguous blocks the labelled tokens are split into.
        chunk_fn: ``(weight, hidden [n, dim], labels [n]) -> [n]`` log-probabilities of one block
            (a loss's compiled ``chunk_loss``, or :func:`token_logps`).

    Returns:
        ``(logps, counts)``: ``[rows]`` fp32 sums (0 for a row without labels) and ``[rows]`` long counts.

    Raises:
        ValueError: if the shapes do not fit together or ``num_chunks`` is not positive.
    """
    if hidden.dim() != 3 or labels.shape != hidden.shape[:2] or weight.shape[-1] != hidden.shape[-1]:
        raise ValueError(
            f"sequence_logps: expected weight [vocab, dim], hidden [rows, s, dim] and labels [rows, s]; got "
            f"weight {list(weight.shape)}, hidden {list(hidden.shape)}, labels {list(labels.shape)}."
        )
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
        raise ValueError(f"sequence_logps: num_chunks must be a positive int, got {num_chunks!r}.")
    rows = hidden.shape[0]
    keep = labels != IGNORE_INDEX  # (rows, s)
    index = keep.reshape(-1).nonzero().squeeze(1)  # (n,) flat positions with a label
    row_of = torch.div(index, labels.shape[1], rounding_mode="floor")  # (n,)
    flat_hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index)  # (n, dim), contiguous
    flat_labels = labels.reshape(-1).index_select(0, index)  # (n,)
    logps = hidden.new_zeros(rows, dtype=torch.float32)
    if index.numel():
        chunks = zip(flat_hidden.chunk(num_chunks), flat_labels.chunk(num_chunks), row_of.chunk(num_chunks))
        for h, y, r in chunks:
            logps = logps.index_add(0, r, chunk_fn(weight, h, y))
    else:
        logps = logps + 0.0 * hidden.sum()  # keep a graph: an all-ignored batch has a zero gradient
    return logps, keep.sum(dim=1)
