"""The CPU block-skipping attention path equals one plain SDPA call, outputs and gradients."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules import causal_mask, document_causal_mask
from ftune.modules.cpu_attention import CPU_QUERY_BLOCK, CPU_ROW_BLOCK, cpu_attention, key_blocks

SEQ = 3 * CPU_QUERY_BLOCK + 17  # a ragged last block


def reference(q, k, v, mask, o_proj):
    """o_proj(SDPA) in one call: the result the blocked path must reproduce."""
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=None if mask is None else mask[:, None], is_causal=mask is None, enable_gqa=True
    )
    return o_proj(out.transpose(1, 2).flatten(2))


def inputs(dtype: torch.dtype, seed: int = 0):
    torch.manual_seed(seed)
    b, h, h_kv, d = 2, 4, 2, 16
    q = torch.randn(b, h, SEQ, d, dtype=dtype, requires_grad=True)
    k = torch.randn(b, h_kv, SEQ, d, dtype=dtype, requires_grad=True)
    v = torch.randn(b, h_kv, SEQ, d, dtype=dtype, requires_grad=True)
    o_proj = nn.Linear(h * d, 24, bias=False, dtype=dtype)
    return q, k, v, o_proj


def documents(lengths: list[list[int]]) -> torch.Tensor:
    """(b, SEQ) document ids from per-row document lengths (each row's lengths sum to SEQ)."""
    rows = [torch.repeat_interleave(torch.arange(len(ls)), torch.tensor(ls)) for ls in lengths]
    return torch.stack(rows)


MASKS = {
    "causal": lambda: None,
    "causal as a mask": lambda: causal_mask(SEQ).expand(2, SEQ, SEQ),
    "packed documents": lambda: document_causal_mask(documents([[40, 90, 60, 19], [60, 149]])),
}


@pytest.mark.parametrize("name", MASKS)
def test_blocked_equals_one_sdpa_call_fp32(name: str) -> None:
    mask = MASKS[name]()
    q, k, v, o_proj = inputs(torch.float32)
    got = cpu_attention(q, k, v, mask, gqa=True, o_proj=o_proj)
    grads = torch.autograd.grad(got.square().sum(), (q, k, v, o_proj.weight))
    want = reference(q, k, v, mask, o_proj)
    want_grads = torch.autograd.grad(want.square().sum(), (q, k, v, o_proj.weight))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", MASKS)
def test_blocked_bf16_forward_exact_gradients_at_least_as_good(name: str) -> None:
    """bf16: the forward is SDPA's own; the fp32-recomputed backward is no further from fp32 truth."""
    mask = MASKS[name]()
    q, k, v, o_proj = inputs(torch.bfloat16)
    got = cpu_attention(q, k, v, mask, gqa=True, o_proj=o_proj)
    grads = torch.autograd.grad(got.float().square().sum(), (q, k, v))
    plain = reference(q, k, v, mask, o_proj)
    plain_grads = torch.autograd.grad(plain.float().square().sum(), (q, k, v))
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    o32 = nn.Linear(o_proj.in_features, o_proj.out_features, bias=False)
    o32.weight.data.copy_(o_proj.weight.float())
    truth = reference(q32, k32, v32, mask, o32)
    truth_grads = torch.autograd.grad(truth.square().sum(), (q32, k32, v32))
    torch.testing.assert_close(got.float(), plain.float(), rtol=2e-2, atol=2e-2)
    for g, p, t in zip(grads, plain_grads, truth_grads):
        assert (g.float() - t).norm() <= 1.05 * (p.float() - t).norm() + 1e-3


def test_key_blocks_spans_and_fallbacks() -> None:
    mask = document_causal_mask(documents([[40, 90, 60, 19], [60, 149]]))
    blocks = key_blocks(mask)
    assert [b[:2] for b in blocks] == [(0, 64), (64, 128), (128, 192), (192, SEQ)]
    # A block's keys run from the start of the earliest document its queries (in any row) are in,
    # to its last query.
    assert [b[2:] for b in blocks] == [(0, 64), (40, 128), (40, 192), (60, SEQ)]
    # A full (non-causal) mask skips nothing: left to one SDPA call.
    assert key_blocks(torch.ones(1, SEQ, SEQ, dtype=torch.bool)) is None
    # A block whose queries see no key at all is left to SDPA too.
    empty = causal_mask(SEQ)[None].clone()
    empty[0, :CPU_QUERY_BLOCK] = False
    assert key_blocks(empty) is None


def test_one_row_blocks_end_at_documents_and_equal_one_sdpa_call(monkeypatch) -> None:
    """A padding-free batch (one row): blocks of up to CPU_ROW_BLOCK rows that never straddle two
    documents, each over its own document's keys only; the result is still one SDPA call's."""
    import ftune.modules.cpu_attention as ca

    lengths = [CPU_ROW_BLOCK + 44, 40, CPU_ROW_BLOCK + 24]  # one doc over the row cap, a short one
    n = sum(lengths)
    mask = document_causal_mask(torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))[None])
    r = CPU_ROW_BLOCK
    d1, d2 = lengths[0], lengths[0] + lengths[1]
    assert key_blocks(mask, r, split_documents=True) == [
        (0, r, 0, r), (r, d1, 0, d1), (d1, d2, d1, d2), (d2, d2 + r, d2, d2 + r), (d2 + r, n, d2, n),
    ]  # fmt: skip
    # Without the split, blocks of 64 rows straddle documents and see keys of the one before.
    assert (d1 // 64 * 64, d1 // 64 * 64 + 64, 0, d1 // 64 * 64 + 64) in key_blocks(mask)

    used = []
    monkeypatch.setattr(ca, "key_blocks", lambda *a, **kw: used.append(kw) or key_blocks(*a, **kw))
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, h, n, 16, requires_grad=True) for h in (4, 2, 2))
    o_proj = nn.Linear(64, 24, bias=False)
    got = cpu_attention(q, k, v, mask, gqa=True, o_proj=o_proj)
    assert used == [{"split_documents": True}]
    want = reference(q, k, v, mask, o_proj)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(got.square().sum(), (q, k, v, o_proj.weight))
    for g, w in zip(grads, torch.autograd.grad(want.square().sum(), (q, k, v, o_proj.weight))):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_attention_module_takes_the_blocked_path_only_for_long_cpu_sequences(monkeypatch) -> None:
    from ftune.modules import GroupedQueryAttention, RotaryEmbedding
    from ftune.modules import attention as attention_module

    calls = []
    monkeypatch.setattr(
        attention_module,
        "cpu_attention",
        lambda *a, **kw: calls.append(a[0].shape[2]) or cpu_attention(*a, **kw),
    )
    torch.manual_seed(0)
    attn = GroupedQueryAttention(
        q_proj=nn.Linear(32, 32), k_proj=nn.Linear(32, 16), v_proj=nn.Linear(32, 16),
        o_proj=nn.Linear(32, 32), num_heads=4, num_kv_heads=2, head_dim=8, rope=RotaryEmbedding(8),
    )  # fmt: skip
    for seq in (2 * CPU_QUERY_BLOCK - 1, 2 * CPU_QUERY_BLOCK):
        attn(torch.randn(1, seq, 32), input_pos=torch.arange(seq)[None])
    assert calls == [2 * CPU_QUERY_BLOCK]


@pytest.mark.slow  # first compile: tens of seconds
def test_causal_blocks_compile_to_the_same_result() -> None:
    q, k, v, o_proj = inputs(torch.float32)
    eager = cpu_attention(q, k, v, None, gqa=True, o_proj=o_proj)
    compiled = torch.compile(cpu_attention, fullgraph=True)(q, k, v, None, gqa=True, o_proj=o_proj)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(compiled.square().sum(), (q, k, v))
    for g, w in zip(grads, torch.autograd.grad(eager.square().sum(), (q, k, v))):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_blocks_are_found_once_per_mask_and_again_when_it_changes(monkeypatch) -> None:
    """Every layer gets the same mask tensor: its blocks (and their host syncs) are found once; a
    new mask, or the same tensor changed in place, is looked at again."""
    import ftune.modules.cpu_attention as ca

    used = []
    monkeypatch.setattr(ca, "key_blocks", lambda *a, **kw: used.append(1) or key_blocks(*a, **kw))
    monkeypatch.setitem(ca.CPU_KERNELS, "masked", [(None, "blocked 64")])  # the batch's blocks, found at once
    mask = MASKS["packed documents"]()
    q, k, v, o_proj = inputs(torch.float32)
    for _ in range(3):  # three layers
        cpu_attention(q, k, v, mask, gqa=True, o_proj=o_proj)
    assert len(used) == 1
    cpu_attention(q, k, v, mask.clone(), gqa=True, o_proj=o_proj)
    assert len(used) == 2
    mask[:, 100:, :100] = False  # one more document boundary, in place
    got = cpu_attention(q, k, v, mask, gqa=True, o_proj=o_proj)
    assert len(used) == 3
    torch.testing.assert_close(got, reference(q, k, v, mask, o_proj), rtol=1e-5, atol=1e-5)
