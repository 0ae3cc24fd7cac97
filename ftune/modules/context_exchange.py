"""Context parallel's attention exchange: each rank holds a contiguous slice of every sequence, and
attention gathers the keys and values of all slices (an all-gather over the ``cp`` ranks), so each
local query sees the whole sequence before it.

An all-gather of keys and values rather than a ring: its memory is one sequence's keys and values
per layer (the queries, the activations and the MLP stay split), it runs on every backend (gloo
included, which has no reduce-scatter), and the attention kernel stays the one the model uses
elsewhere. The backward sums every rank's gradient for the gathered keys and values and keeps the
rank's own slice (an all-reduce: gloo's stand-in for a reduce-scatter).

The mask is built from global positions (the slices' ``input_pos``), so it is causal over the whole
sequence and RoPE already rotated each key by its global position. A packed batch's mask (per-document,
positions restarting in each document) is sliced by rows: each rank keeps its queries' rows over every
key.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class _GatherSequence(torch.autograd.Function):
    """All-gather along the sequence dimension (dim 2 of (b, h, s, d)); backward: the summed gradient's own slice."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup, dim: int) -> torch.Tensor:
        ctx.group, ctx.dim = group, dim
        ctx.rank, ctx.size = dist.get_rank(group), x.shape[dim]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)  # every rank's queries attended to this rank's keys
        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size), None, None


def gather_sequence(x: torch.Tensor, group: dist.ProcessGroup, dim: int) -> torch.Tensor:
    """The whole sequence of `x` (every context-parallel rank's slice, in rank order) along `dim`,
    differentiable."""
    return _GatherSequence.apply(x, group, dim)


def gather_context(
    k: torch.Tensor, v: torch.Tensor, input_pos: torch.Tensor, group: dist.ProcessGroup
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys, values and key positions of the whole sequence, from this rank's slice of each.

    Args:
        k: this slice's keys (b, h_kv, s, d), rotated at their global positions.
        v: this slice's values (b, h_kv, s, d).
        input_pos: this slice's global positions (b or 1, s).
        group: the context-parallel ranks of this sequence.

    Returns:
        Keys and values (b, h_kv, s * cp, d) and their positions (b or 1, s * cp).
    """
    with torch.no_grad():
        key_pos = gather_sequence(input_pos, group, dim=1)  # (b or 1, s * cp)
    return gather_sequence(k, group, dim=2), gather_sequence(v, group, dim=2), key_pos


def global_causal_mask(
    query_pos: torch.Tensor, key_pos: torch.Tensor, sliding_window: int | None, mask: torch.Tensor | None
) -> torch.Tensor:
    """bool (b or 1, s_q, s_kv), True where a query of this slice may attend a key of the sequence.

    Args:
        query_pos: (b or 1, s_q) the slice's positions.
        key_pos: (b or 1, s_kv) every slice's positions, in order.
        sliding_window: attend only within this many positions, or None.
        mask: the slice's rows of a packed batch's mask (b, s_q, s_kv), or None: causal over the
            positions, which are global, so this is the whole sequence's causal mask.
    """
    if mask is None:
        mask = key_pos[:, None, :] <= query_pos[:, :, None]  # (b or 1, s_q, s_kv)
    if sliding_window is not None:
        mask = mask & (query_pos[:, :, None] - key_pos[:, None, :] < sliding_window)
    return mask


class ContextSplit:
    """How a decoder splits each sequence over its context-parallel ranks: contiguous slices in rank
    order, padded at the end to a multiple of the rank count (padding sits after every real position,
    so causality hides it, and `gather` drops it).

    Args:
        group: the process group of the ranks that share each sequence.
    """

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)

    def check(self, *, images: bool, caches: bool) -> None:
        """Refuse the inputs this split cannot take: images (embedded or cross-attended) and KV caches."""
        if images or caches:
            what = "images" if images else "KV caches (decoding)"
            raise ValueError(
                f"context parallel ({self.size} ranks per sequence) splits the token sequences of training "
                f"forwards; this forward has {what}, which would need an exchange of their own. Set "
                "context_parallel_dim=1 for image-text models; generation runs on one device."
            )

    def slice(
        self, tokens: torch.Tensor, input_pos: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """This rank's slice of `tokens` (b, s), of their positions (b or 1, s) and of the mask's rows.

        Args:
            tokens: (b, s) token ids.
            input_pos: (b or 1, s) positions (global, or per document in a packed row).
            mask: bool (b, s, s) (packed documents), or None: causal over the positions.

        Returns:
            (b, chunk) tokens, (b or 1, chunk) positions, and the mask's rows of this slice over every
            key, (b, chunk, chunk * cp), or None.
        """
        b, s = tokens.shape
        chunk = -(-s // self.size)  # ceil
        pad = chunk * self.size - s
        if pad:  # positions go on past the end, so no real query attends a padding key
            tokens = torch.cat([tokens, tokens.new_zeros(b, pad)], dim=1)  # (b, chunk * cp)
            more = input_pos[:, -1:] + torch.arange(1, pad + 1, device=input_pos.device)  # (b or 1, pad)
            input_pos = torch.cat([input_pos, more], dim=1)
            if mask is not None:  # padding rows attend to themselves only (no all-masked row: no NaN)
                padded = torch.eye(s + pad, dtype=torch.bool, device=mask.device).repeat(b, 1, 1)
                padded[:, :s, :s] = mask
                mask = padded  # (b, chunk * cp, chunk * cp)
        rows = slice(self.rank * chunk, (self.rank + 1) * chunk)
        return tokens[:, rows], input_pos[:, rows], None if mask is None else mask[:, rows]

    def gather(self, hidden: torch.Tensor, length: int) -> torch.Tensor:
        """Every rank's slice of `hidden` (b, chunk, d) put back in order: (b, length, d), differentiable."""
        whole = gather_sequence(hidden, self.group, dim=1)  # (b, chunk * cp, d)
        # A copy when padded: FSDP2 warns of a view as a module's output (an in-place op would skip its hook).
        return whole if whole.shape[1] == length else whole[:, :length].clone()
