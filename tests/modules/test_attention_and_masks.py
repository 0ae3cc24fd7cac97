"""Grouped-query attention paths and the packed-document mask."""

import pytest
import torch
from torch import nn

from ftune.modules import GroupedQueryAttention, RotaryEmbedding, causal_mask, document_causal_mask


def make_attention(
    num_heads: int, num_kv_heads: int, *, bias: bool = False, seed: int = 0
) -> GroupedQueryAttention:
    torch.manual_seed(seed)
    dim, head_dim = 32, 8
    return GroupedQueryAttention(
        q_proj=nn.Linear(dim, num_heads * head_dim, bias=bias),
        k_proj=nn.Linear(dim, num_kv_heads * head_dim, bias=bias),
        v_proj=nn.Linear(dim, num_kv_heads * head_dim, bias=bias),
        o_proj=nn.Linear(num_heads * head_dim, dim, bias=False),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        rope=RotaryEmbedding(head_dim),
    )


def test_document_causal_mask() -> None:
    ids = torch.tensor([[0, 0, 1, 1, 1]])
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 0, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 1, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(document_causal_mask(ids)[0], expected)
    assert torch.equal(
        document_causal_mask(torch.zeros(2, 4, dtype=torch.long)), causal_mask(4).expand(2, 4, 4)
    )
    with pytest.raises(ValueError, match=r"document_ids must have shape \(batch, seq_len\), got \(5,\)"):
        document_causal_mask(ids[0])


@pytest.mark.parametrize("bias", [False, True])
def test_mask_path_equals_causal_fast_path(bias: bool) -> None:
    attn = make_attention(4, 2, bias=bias)
    x, pos = torch.randn(2, 9, 32), torch.arange(9)[None]
    fast = attn(x, input_pos=pos)
    masked = attn(x, input_pos=pos, mask=causal_mask(9).expand(2, 9, 9))
    torch.testing.assert_close(masked, fast, rtol=1e-5, atol=1e-6)


def test_grouped_query_attention_equals_mha_with_repeated_kv_heads() -> None:
    gqa = make_attention(4, 2)
    mha = make_attention(4, 4, seed=1)
    with torch.no_grad():
        mha.q_proj.weight.copy_(gqa.q_proj.weight)
        mha.o_proj.weight.copy_(gqa.o_proj.weight)
        for name in ("k_proj", "v_proj"):
            w = getattr(gqa, name).weight.view(2, 8, 32)  # (kv heads, head_dim, dim)
            getattr(mha, name).weight.copy_(w.repeat_interleave(2, dim=0).reshape(32, 32))
    x, pos = torch.randn(1, 6, 32), torch.arange(6)[None]
    torch.testing.assert_close(gqa(x, input_pos=pos), mha(x, input_pos=pos), rtol=1e-5, atol=1e-6)


def test_linears_are_reachable_by_hf_names() -> None:
    attn = make_attention(4, 2)
    assert {n for n, m in attn.named_children() if isinstance(m, nn.Linear)} == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
    }
    with pytest.raises(ValueError, match=r"num_heads \(4\) must be a multiple of num_kv_heads \(3\)"):
        make_attention(4, 3)


def test_sliding_window_within_packed_documents() -> None:
    windowed, plain = make_attention(4, 2), make_attention(4, 2)
    windowed.sliding_window = 3
    ids = torch.tensor([[0] * 6 + [1] * 5])
    pos = torch.cat([torch.arange(6), torch.arange(5)])[None]  # positions restart per document
    index = torch.arange(11)
    near = (index[:, None] - index[None, :] < 3)[None]  # within a document: index gap == position gap
    x = torch.randn(1, 11, 32)
    got = windowed(x, input_pos=pos, mask=document_causal_mask(ids))
    want = plain(x, input_pos=pos, mask=document_causal_mask(ids) & near)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, plain(x, input_pos=pos, mask=document_causal_mask(ids)))
