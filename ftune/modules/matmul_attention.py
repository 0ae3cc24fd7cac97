"""Attention by blocks of plain matrix products on CPU, the query heads of a group stacked into one product.

Each block of query rows is multiplied with only the keys its mask lets it see (as the blocked SDPA
calls of ``ftune.modules.cpu_attention`` are), but computed with ``torch.matmul`` and an explicit
softmax: the query heads that share a key/value head are stacked into the rows of one product
(``(b, h_kv, rows x group, d) @ (b, h_kv, d, keys)``), so a product is ``group`` times taller than one
head's, with no copy of the keys, and a block costs a few operator calls (a one-row batch of short
packed documents has many small blocks, where an SDPA call's own overhead shows). The backward
recomputes the probabilities from the saved log-sum-exp (as flash attention does): it saves q, k, v,
the output (the tensor the output projection saves anyway) and one float a query row, never the
probabilities. fp32 and fp64 only (the softmax is
computed in the input dtype); ``cpu_attention`` uses SDPA blocks for other dtypes.
"""

from __future__ import annotations

from typing import Any

import torch

Blocks = list[tuple[int, int, int, int]]  # (q_start, q_end, k_start, k_end)


def _block_mask(
    mask: torch.Tensor | None, q0: int, q1: int, k0: int, k1: int, device: torch.device
) -> torch.Tensor | None:
    """The block's bool mask shaped (b or 1, 1, rows, 1, keys); None when the block sees every key."""
    if mask is not None:
        return mask[:, None, q0:q1, None, k0:k1]
    if k1 <= q0 + 1:  # causal, and every key precedes every query of the block
        return None
    rows = torch.arange(q0, q1, device=device)[:, None]
    return (torch.arange(k0, k1, device=device)[None] <= rows)[None, None, :, None, :]


def _scores(
    qb: torch.Tensor, kb: torch.Tensor, scale: float, mb: torch.Tensor | None, group: int
) -> torch.Tensor:
    """Scaled, masked scores (b, h_kv, rows, group, keys) of the stacked queries qb (b, h_kv, rows x group, d)."""
    s = torch.matmul(qb, kb.transpose(-1, -2)).mul_(scale)
    b, h_kv, rows, keys = s.shape
    s = s.view(b, h_kv, rows // group, group, keys)
    if mb is not None:
        s.masked_fill_(~mb, float("-inf"))
    return s


class MatmulAttention(torch.autograd.Function):
    """Blocked attention by matrix products, forward and a recomputing backward.

    The output comes with the heads flattened, (b, s, h x d), the layout the output projection takes: it
    is saved for the backward as the same tensor the projection saves, and q (not a copy) is saved.
    """

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                blocks: Blocks) -> torch.Tensor:  # fmt: skip
        b, h, s, d = q.shape
        h_kv = k.shape[1]
        group, scale = h // h_kv, d**-0.5
        # (b, h_kv, s, group, d), a view: each block's reshape below copies its own rows (no whole copy of q)
        qs = q.view(b, h_kv, group, s, d).transpose(2, 3)
        out = q.new_empty(b, s, h_kv, group, d)
        lse = q.new_empty(b, h_kv, s, group)
        for q0, q1, k0, k1 in blocks:
            qb = qs[:, :, q0:q1].reshape(b, h_kv, (q1 - q0) * group, d)
            p = _scores(qb, k[:, :, k0:k1], scale, _block_mask(mask, q0, q1, k0, k1, q.device), group)
            top = p.amax(-1, keepdim=True)
            p = p.sub_(top).exp_()
            total = p.sum(-1, keepdim=True)
            o = torch.matmul(p.view(b, h_kv, -1, k1 - k0), v[:, :, k0:k1])  # (b, h_kv, rows x group, d)
            out[:, q0:q1] = o.view(b, h_kv, q1 - q0, group, d).div_(total).transpose(1, 2)
            lse[:, :, q0:q1] = (top + total.log()).squeeze(-1)
        result = out.view(b, s, h * d)
        ctx.save_for_backward(q, k, v, result, lse, *(() if mask is None else (mask,)))
        ctx.blocks = blocks
        return result

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, result, lse, *rest = ctx.saved_tensors
        mask = rest[0] if rest else None
        b, h, s, d = q.shape
        h_kv = k.shape[1]
        group, scale = h // h_kv, d**-0.5
        qs = q.view(b, h_kv, group, s, d).transpose(2, 3)  # (b, h_kv, s, group, d), a view as in forward
        go = grad.reshape(b, s, h_kv, group, d)
        delta = (go * result.view(b, s, h_kv, group, d)).sum(-1).transpose(1, 2)  # (b, h_kv, s, group)
        # dq in q's own memory layout (empty_like keeps qs's strides): its (b, h, s, d) view below is free
        dq, dk, dv = torch.empty_like(qs), torch.zeros_like(k), torch.zeros_like(v)
        for q0, q1, k0, k1 in ctx.blocks:
            rows, keys = (q1 - q0) * group, k1 - k0
            qb = qs[:, :, q0:q1].reshape(b, h_kv, rows, d)
            gb = go[:, q0:q1].transpose(1, 2).reshape(b, h_kv, rows, d)
            kb, vb = k[:, :, k0:k1], v[:, :, k0:k1]
            p = _scores(qb, kb, scale, _block_mask(mask, q0, q1, k0, k1, q.device), group)
            p = p.sub_(lse[:, :, q0:q1, :, None]).exp_()  # (b, h_kv, rows, group, keys): probabilities
            dv[:, :, k0:k1] += torch.matmul(p.view(b, h_kv, rows, keys).transpose(-1, -2), gb)
            ds = torch.matmul(gb, vb.transpose(-1, -2)).view_as(p)  # dP
            ds = ds.sub_(delta[:, :, q0:q1, :, None]).mul_(p).mul_(scale).view(b, h_kv, rows, keys)
            dq[:, :, q0:q1] = torch.matmul(ds, kb).view(b, h_kv, q1 - q0, group, d)
            dk[:, :, k0:k1] += torch.matmul(ds.transpose(-1, -2), qb)
        return dq.transpose(2, 3).reshape(b, h, s, d), dk, dv, None, None


def matmul_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                     blocks: Blocks) -> torch.Tensor:  # fmt: skip
    """Attention of q (b, h, s, d) over k, v (b, h_kv, s, d), block by block; mask (b or 1, s, s) bool,
    None = causal. Returns (b, s, h x d): the heads flattened, as the output projection takes them."""
    return MatmulAttention.apply(q, k, v, mask, blocks)
