"""Attention on CPU that skips the (query, key) blocks a causal or packed-document mask excludes.

PyTorch's CPU attention kernels compute every (query, key) pair of a masked sequence, and skip
little even with ``is_causal=True`` (measured on SmolLM2-135M's shapes: causal costs about what
a full mask does). A causal mask leaves half of the pairs unused and a packed-document mask most
of them (7 documents in 512 tokens use about 1/7). Attending block of queries by block of queries,
each over only the span of keys it can see, skips that work. The skipped keys are exactly those
the mask excludes for every query of a block, so the result is that of one SDPA call up to float
rounding (``tests/modules/test_cpu_attention.py``). Which blocks (their size, SDPA calls or plain
matrix products, a batch at once or row by row), or one SDPA call, is chosen per mask kind and sequence
length by ``CPU_KERNELS``, the fastest of ``benchmarks/attention.py``'s measurements.
"""

import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.matmul_attention import Blocks, matmul_attention

# Query rows per block; 64 was the fastest of 32 / 64 / 128 for SmolLM2-135M (9 heads of 64,
# 512 tokens, fp32 and bf16).
CPU_QUERY_BLOCK = 64
# Query rows per block when the batch is one row (a padding-free batch): its blocks also end at
# each document's start. 256 was the fastest of 64 / 128 / 256 / 384 on 8 padding-free batches of
# IFBench samples (SmolLM2-135M, fp32), 1.1-1.2x faster than 64-row blocks that straddle documents:
# each block's output projection is one (rows x 576) GEMM, too small at 64 rows and b = 1.
CPU_ROW_BLOCK = 256
# Self-attention over at least this many query rows (no cache) takes `cpu_attention` (the planner
# counts its kernels from the same length).
CPU_ATTENTION_FROM = 2 * CPU_QUERY_BLOCK
# Use the blocked path for a mask only when it skips at least this share of the pairs.
_MIN_SKIPPED = 0.25

# The kernel per mask kind and sequence length: the fastest exact option of benchmarks/attention.py
# (benchmarks/results/attention.json, 2 threads, nothing else running; tests/benchmarks/test_attention.py
# checks the table against that file). Per kind, (longest sequence, kernel) in order, None = any
# longer. "sdpa": one SDPA call (PyTorch's flash kernel on CPU); "blocked N": SDPA calls on blocks of N
# query rows, each over the keys its rows may see; "matmul N": the same blocks as matrix products
# (`ftune.modules.matmul_attention`; fp32 and fp64, other dtypes take "blocked N"). A mask of one row
# (a padding-free batch) has blocks that also end at each document's start; "... by row" (masks of
# several rows) attends row by row, each row so. A row of one document takes "causal" (its mask is None).
CPU_KERNELS: dict[str, list[tuple[int | None, str]]] = {
    "causal": [(1024, "matmul 64"), (4096, "sdpa"), (None, "sdpa")],
    "masked": [(None, "blocked 64 by row")],
    "masked, one row": [(4096, "matmul 64"), (None, "matmul 256")],
}


def cpu_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    gqa: bool,
    o_proj: nn.Module,
) -> torch.Tensor:
    """``o_proj(attention(q, k, v))`` computed block by block.

    The output projection is applied per block, so that it saves for backward the block SDPA
    saves anyway; one ``o_proj`` over the concatenated blocks would keep another copy of the
    whole attention output (141 MiB for SmolLM2-135M, fp32, 4 x 512 tokens).

    Args:
        q: queries (b, h, s, d).
        k: keys (b, h_kv, s, d).
        v: values (b, h_kv, s, d).
        mask: bool (b, s, s), True = may attend; None = causal.
        gqa: h_kv < h (grouped-query attention).
        o_proj: the output projection, (b, s, h * d) -> (b, s, dim).

    Returns:
        (b, s, dim).
    """
    kind = "causal" if mask is None else "masked, one row" if q.shape[0] == 1 else "masked"
    kernel = cpu_kernel(kind, q.shape[2])
    if kernel == "sdpa":
        out = _sdpa(q, k, v, None if mask is None else mask[:, None], gqa)
        return o_proj(out.transpose(1, 2).flatten(2))
    how, rows, *by_row = kernel.split()
    attend = _matmul if how == "matmul" and q.dtype in (torch.float32, torch.float64) else _masked
    if mask is None:
        return (
            _matmul(q, k, v, None, gqa, o_proj, int(rows))
            if attend is _matmul
            else _causal(q, k, v, gqa, o_proj, int(rows))
        )
    if by_row and q.shape[0] > 1 and mask.shape[0] == q.shape[0]:
        # Each row alone: its blocks end at its own documents' starts (a batch's blocks span every row's).
        rows_out = [
            attend(q[i : i + 1], k[i : i + 1], v[i : i + 1], mask, gqa, o_proj, int(rows), row=i)
            for i in range(q.shape[0])
        ]
        return torch.cat(rows_out)
    return attend(q, k, v, mask, gqa, o_proj, int(rows))


def cpu_kernel(kind: str, seq_len: int) -> str:
    """`CPU_KERNELS`' kernel for a mask kind ("causal", "masked", "masked, one row") and a sequence length."""
    return next(kernel for longest, kernel in CPU_KERNELS[kind] if longest is None or seq_len <= longest)


def key_blocks(
    mask: torch.Tensor, block: int = CPU_QUERY_BLOCK, *, split_documents: bool = False
) -> Blocks | None:
    """Split the queries into blocks and find, per block, the span of keys any of them may see.

    Args:
        mask: bool (b, s, s_kv), True = may attend.
        block: query rows per block (at most).
        split_documents: also start a block at every row that sees no key of the row before it
            in any row of the batch (a document's first token, for a packed-document mask), so that
            no block straddles two documents and its key span holds only its own document.

    Returns:
        ``[(q_start, q_end, k_start, k_end), ...]`` covering the queries, or None when blocking
        would skip less than a quarter of the pairs or some query sees no key at all (both are
        left to one SDPA call).
    """
    _, s, s_kv = mask.shape
    seen = mask.any(dim=0).to(torch.uint8)  # (s, s_kv): keys any row of the batch may see
    first = seen.argmax(dim=1)  # the first maximum: the first key seen (0 when none is)
    last = s_kv - seen.flip(1).argmax(dim=1)  # one past the last key seen
    sees_any = seen.amax(dim=1)
    starts = [0]
    if split_documents and s > 1:
        cut = ~mask.diagonal(offset=-1, dim1=1, dim2=2).any(dim=0)  # (s - 1,): row r + 1 sees not r
        starts += (cut.nonzero().flatten() + 1).tolist()
    first_l, last_l, any_l = first.tolist(), last.tolist(), sees_any.tolist()  # host syncs
    if not all(any_l):
        return None
    blocks = []
    for start, end in zip(starts, starts[1:] + [s]):
        for q0 in range(start, end, block):
            q1 = min(q0 + block, end)
            blocks.append((q0, q1, min(first_l[q0:q1]), max(last_l[q0:q1])))
    used = sum((q1 - q0) * (k1 - k0) for q0, q1, k0, k1 in blocks)
    return blocks if used <= (1 - _MIN_SKIPPED) * s * s_kv else None


def _causal(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gqa: bool,
    o_proj: nn.Module,
    rows: int = CPU_QUERY_BLOCK,
) -> torch.Tensor:
    """Causal attention: the blocks depend on the shape only, so this compiles without a break."""
    s = q.shape[2]
    causal = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()[None]  # (1, s, s)
    ends = [min(q0 + rows, s) for q0 in range(0, s, rows)]
    blocks = [(q0, q1, 0, q1) for q0, q1 in zip(range(0, s, rows), ends)]
    return _blocked(q, k, v, causal, blocks, gqa, o_proj)


# The last mask's blocks: every layer of a forward (and a checkpointed layer's recompute) gets the
# same mask tensor, so its blocks, with their host syncs, are found once a forward, not once a layer.
# [(weak reference to the mask, its version counter, {(block, split_documents, batch row): blocks})]
_last_blocks: list[tuple[Any, int, dict[tuple[int, bool, int | None], Blocks | None]]] = []


def cached_key_blocks(
    mask: torch.Tensor, block: int, *, split_documents: bool, row: int | None = None
) -> Blocks | None:
    """`key_blocks` of `mask` (of its batch row `row` alone, if given), reused while the same, unmodified
    mask tensor comes back."""
    if not (_last_blocks and _last_blocks[0][0]() is mask and _last_blocks[0][1] == mask._version):
        _last_blocks[:] = [(weakref.ref(mask), mask._version, {})]
    found = _last_blocks[0][2]
    key = (block, split_documents, row)
    if key not in found:
        rows = mask if row is None else mask[row : row + 1]
        found[key] = key_blocks(rows, block, split_documents=split_documents)
    return found[key]


@torch.compiler.disable  # the blocks depend on the mask's values: run eagerly (one graph break)
def _masked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    gqa: bool,
    o_proj: nn.Module,
    rows: int,
    row: int | None = None,
) -> torch.Tensor:
    """o_proj(attention) by SDPA blocks; q, k, v of batch row `row` alone (with its row of mask), when given."""
    # One row (padding-free batches, or a row alone): blocks also end at each document's start.
    blocks = cached_key_blocks(mask, rows, split_documents=q.shape[0] == 1, row=row)
    mask = mask if row is None else mask[row : row + 1]
    if blocks is None:
        return o_proj(_sdpa(q, k, v, mask[:, None], gqa).transpose(1, 2).flatten(2))
    return _blocked(q, k, v, mask, blocks, gqa, o_proj)


@torch.compiler.disable  # a loop of blocks in an autograd.Function: run eagerly (one graph break)
def _matmul(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    gqa: bool,
    o_proj: nn.Module,
    rows: int,
    row: int | None = None,
) -> torch.Tensor:
    """o_proj(attention) with the blocks as matrix products; mask (b or 1, s, s) or None (causal); q, k, v
    of batch row `row` alone (with its row of mask), when given."""
    s = q.shape[2]
    if mask is None:
        blocks = [(q0, min(q0 + rows, s), 0, min(q0 + rows, s)) for q0 in range(0, s, rows)]
    else:
        blocks = cached_key_blocks(mask, rows, split_documents=q.shape[0] == 1, row=row)
        mask = mask if row is None else mask[row : row + 1]
        if blocks is None:  # nothing to skip, or a query that sees no key: one SDPA call
            return o_proj(_sdpa(q, k, v, mask[:, None], gqa).transpose(1, 2).flatten(2))
    return o_proj(matmul_attention(q, k, v, mask, blocks))  # (b, s, h * d) in, as o_proj takes it


def _blocked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    blocks: Blocks,
    gqa: bool,
    o_proj: nn.Module,
) -> torch.Tensor:
    """o_proj(SDPA) block by block; mask (b or 1, s, s); returns (b, s, dim)."""
    outs = []
    for q0, q1, k0, k1 in blocks:
        block_mask = mask[:, None, q0:q1, k0:k1]  # (b or 1, 1, q block, k span)
        out = _sdpa(q[:, :, q0:q1], k[:, :, k0:k1], v[:, :, k0:k1], block_mask, gqa)  # (b, h, q block, d)
        outs.append(o_proj(out.transpose(1, 2).flatten(2)))  # (b, q block, dim)
    return torch.cat(outs, dim=1)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, gqa: bool
) -> torch.Tensor:
    """SDPA (mask None: causal); in bf16 / fp16 with the backward recomputed in fp32 (`_Fp32BackwardAttention`)."""
    low_precision = q.dtype in (torch.bfloat16, torch.float16)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if low_precision and needs_grad and not torch.compiler.is_compiling():
        return _Fp32BackwardAttention.apply(q, k, v, mask, gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=gqa)


class _Fp32BackwardAttention(torch.autograd.Function):
    """SDPA whose forward runs in the input dtype and whose backward recomputes it in fp32.

    PyTorch's CPU attention backward is about 2x slower in bf16 than in fp32 (measured on
    SmolLM2-135M's shapes); recomputing the forward in fp32 and backpropagating through that is
    still faster, and saves only q, k, v and the mask (no output, no log-sum-exp). The forward,
    hence the loss, is plain SDPA's; the gradients are those of the fp32 computation rounded to
    the input dtype, at least as accurate as the low-precision backward (tested).
    """

    @staticmethod
    def forward(
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, gqa: bool
    ) -> torch.Tensor:
        ctx.save_for_backward(q, k, v, mask)
        ctx.gqa = gqa
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=gqa)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask = ctx.saved_tensors
        needed = ctx.needs_input_grad[:3]
        with torch.enable_grad():
            inputs = [t.detach().float().requires_grad_(n) for t, n in zip((q, k, v), needed)]
            out = F.scaled_dot_product_attention(
                *inputs, attn_mask=mask, is_causal=mask is None, enable_gqa=ctx.gqa
            )
            wanted = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, grad.float()))
        return *(next(grads).to(t.dtype) if n else None for t, n in zip((q, k, v), needed)), None, None
