"""Every kernel the CPU attention table may pick equals one SDPA call, outputs and gradients."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ftune.modules.cpu_attention as ca
from ftune.modules import causal_mask, document_causal_mask

SEQ = 3 * 64 + 17  # a ragged last block at every block size
KERNELS = (
    "sdpa",
    "blocked 64",
    "blocked 256",
    "matmul 64",
    "matmul 256",
    "blocked 64 by row",
    "matmul 64 by row",
)


def documents(lengths: list[list[int]]) -> torch.Tensor:
    rows = [torch.repeat_interleave(torch.arange(len(ls)), torch.tensor(ls)) for ls in lengths]
    return document_causal_mask(torch.stack(rows))


MASKS = {  # name -> (batch, mask)
    "causal": (2, lambda: None),
    "causal as a mask": (2, lambda: causal_mask(SEQ)[None].expand(2, SEQ, SEQ)),
    "packed documents": (2, lambda: documents([[40, 90, 60, 19], [60, 149]])),
    "packed documents, one row": (1, lambda: documents([[100, 30, 79]])),
}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", MASKS)
def test_each_kernel_equals_one_sdpa_call(monkeypatch, kernel: str, name: str) -> None:
    monkeypatch.setattr(ca, "CPU_KERNELS", {kind: [(None, kernel)] for kind in ca.CPU_KERNELS})
    batch, make_mask = MASKS[name]
    mask = make_mask()
    torch.manual_seed(0)
    q = torch.randn(batch, 4, SEQ, 16, requires_grad=True)
    k, v = (torch.randn(batch, 2, SEQ, 16, requires_grad=True) for _ in range(2))
    o_proj = nn.Linear(64, 24, bias=False)
    got = ca.cpu_attention(q, k, v, mask, gqa=True, o_proj=o_proj)
    want = F.scaled_dot_product_attention(
        q, k, v, attn_mask=None if mask is None else mask[:, None], is_causal=mask is None, enable_gqa=True
    )
    want = o_proj(want.transpose(1, 2).flatten(2))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(got.square().sum(), (q, k, v, o_proj.weight))
    for g, w in zip(grads, torch.autograd.grad(want.square().sum(), (q, k, v, o_proj.weight))):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_the_table_names_a_known_kernel_for_every_length() -> None:
    assert set(ca.CPU_KERNELS) == {"causal", "masked", "masked, one row"}
    for kind, entries in ca.CPU_KERNELS.items():
        bounds = [longest for longest, _ in entries]
        assert bounds[-1] is None and None not in bounds[:-1], kind  # the last entry takes any length
        assert bounds[:-1] == sorted(bounds[:-1]), kind
        for _, kernel in entries:
            assert kernel == "sdpa" or re.fullmatch(r"(blocked|matmul) [1-9]\d*( by row)?", kernel), (
                kind,
                kernel,
            )
    longest = {kind: entries[-1][1] for kind, entries in ca.CPU_KERNELS.items()}
    assert ca.cpu_kernel("causal", 10**6) == longest["causal"]
    first_bound, first_kernel = ca.CPU_KERNELS["causal"][0]
    if first_bound is not None:
        assert ca.cpu_kernel("causal", first_bound) == first_kernel


def test_a_matmul_kernel_leaves_bf16_to_sdpa_blocks(monkeypatch) -> None:
    """The matrix-product kernel computes its softmax in the input dtype: bf16 takes the SDPA blocks."""
    monkeypatch.setattr(ca, "CPU_KERNELS", {kind: [(None, "matmul 64")] for kind in ca.CPU_KERNELS})
    monkeypatch.setattr(ca, "matmul_attention", lambda *a: pytest.fail("matmul_attention ran in bf16"))
    torch.manual_seed(0)
    q = torch.randn(2, 4, SEQ, 16, dtype=torch.bfloat16)
    k, v = (torch.randn(2, 2, SEQ, 16, dtype=torch.bfloat16) for _ in range(2))
    got = ca.cpu_attention(q, k, v, None, gqa=True, o_proj=nn.Identity())
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2).flatten(2)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_by_row_blocks_end_at_each_rows_own_documents(monkeypatch) -> None:
    """A batch's blocks span the keys of every row's documents; row by row, each block sees its own."""
    mask = MASKS["packed documents"][1]()
    assert ca.key_blocks(mask, 64)[1] == (64, 128, 40, 128)  # row 0's document from 40, row 1's from 60
    assert ca.cached_key_blocks(mask, 64, split_documents=True, row=1) == [
        (0, 60, 0, 60), (60, 124, 60, 124), (124, 188, 60, 188), (188, SEQ, 60, SEQ),
    ]  # fmt: skip
    found = []
    monkeypatch.setattr(ca, "key_blocks", lambda *a, **kw: found.append(a[0].shape) or [(0, SEQ, 0, SEQ)])
    monkeypatch.setattr(ca, "_last_blocks", [])
    for _ in range(3):  # three layers: each row's blocks are found once
        ca.cached_key_blocks(mask, 64, split_documents=True, row=0)
        ca.cached_key_blocks(mask, 64, split_documents=True, row=1)
    assert found == [(1, SEQ, SEQ), (1, SEQ, SEQ)]


def test_the_matmul_kernel_reads_q_in_its_own_layout_and_returns_its_gradient_so() -> None:
    # q as attention makes it: a (b, h, s, d) view of the projection's (b, s, h, d) rows. The kernel copies
    # a block of q at a time (no whole copy, which the heap would keep at long rows), and its gradient
    # comes back in q's layout, a view of the buffer it filled.
    from ftune.modules.matmul_attention import matmul_attention

    b, s = 2, 256
    q = torch.randn(b, s, 9, 64).transpose(1, 2).requires_grad_()
    k, v = (torch.randn(b, s, 3, 64).transpose(1, 2).requires_grad_() for _ in range(2))
    blocks = [(q0, q0 + 64, 0, q0 + 64) for q0 in range(0, s, 64)]
    out = matmul_attention(q, k, v, None, blocks)
    (grad_q,) = torch.autograd.grad(out, q, torch.randn_like(out))  # as computed (.grad would re-lay it out)
    assert grad_q.stride() == q.stride()
    want = F.scaled_dot_product_attention(*(t.detach() for t in (q, k, v)), is_causal=True, enable_gqa=True)
    assert torch.allclose(out, want.transpose(1, 2).flatten(2), atol=1e-5)
