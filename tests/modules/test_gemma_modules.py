"""Gemma's building blocks against transformers' own, bit for bit in bf16 (where rounding order shows)."""

import pytest
import torch
from torch import nn

from ftune.modules.geglu import GeGLU
from ftune.modules.gemma_rms_norm import GemmaRMSNorm
from ftune.modules.linear_rope_scaling import LinearRopeScaling
from ftune.modules.scaled_embedding import ScaledEmbedding

gemma3 = pytest.importorskip("transformers.models.gemma3.modeling_gemma3")


def test_scaled_embedding_rounds_the_scale_to_the_weight_dtype() -> None:
    torch.manual_seed(0)
    ours = ScaledEmbedding(32, 640, scale=640**0.5).to(torch.bfloat16)
    theirs = gemma3.Gemma3TextScaledWordEmbedding(32, 640, padding_idx=0, embed_scale=640**0.5).to(
        torch.bfloat16
    )
    theirs.weight.data.copy_(ours.weight)
    tokens = torch.arange(32)[None]
    assert torch.equal(ours(tokens), theirs(tokens))
    # sqrt(640) = 25.298 is 25.25 in bf16: the product differs from scaling in fp32, then rounding.
    exact = (ours.weight.float() * 640**0.5).to(torch.bfloat16)
    assert not torch.equal(ours(tokens)[0], exact)
    assert ours.state_dict().keys() == {"weight"}


def test_gemma_rms_norm_matches_transformers_in_bf16() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 5, 64).to(torch.bfloat16)
    ours, theirs = GemmaRMSNorm(64, eps=1e-6), gemma3.Gemma3RMSNorm(64, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
    assert torch.equal(ours(x), theirs(x))
    fresh = GemmaRMSNorm(64)
    assert torch.equal(fresh.weight, torch.zeros(64))  # zero-centred: identity scale
    fresh.weight.data.fill_(3.0)
    fresh.reset_parameters()
    assert torch.equal(fresh.weight, torch.zeros(64))


def test_geglu_matches_transformers_mlp() -> None:
    import transformers

    config = transformers.Gemma3TextConfig(hidden_size=32, intermediate_size=48)
    torch.manual_seed(0)
    theirs = gemma3.Gemma3MLP(config)
    ours = GeGLU(gate_proj=theirs.gate_proj, up_proj=theirs.up_proj, down_proj=theirs.down_proj)
    x = torch.randn(2, 7, 32)
    assert torch.equal(ours(x), theirs(x))
    exact_gelu = theirs.down_proj(nn.functional.gelu(theirs.gate_proj(x)) * theirs.up_proj(x))
    assert not torch.allclose(ours(x), exact_gelu, rtol=0, atol=1e-7)  # the tanh approximation is used


def test_linear_rope_scaling_divides_every_frequency() -> None:
    inv_freq = torch.tensor([1.0, 0.1, 0.01])
    assert torch.equal(LinearRopeScaling(8.0).apply(inv_freq), inv_freq / 8.0)
    with pytest.raises(ValueError, match=r"factor must be > 0, got 0.0; Gemma 3 4B uses 8.0"):
        LinearRopeScaling(0.0)


def test_attention_takes_q_and_k_norms_together() -> None:
    from ftune.modules.attention import GroupedQueryAttention
    from ftune.modules.rope import RotaryEmbedding

    linears = {name: nn.Linear(16, 16, bias=False) for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
    with pytest.raises(ValueError, match="give both q_norm and k_norm, or neither"):
        GroupedQueryAttention(
            **linears,
            num_heads=2,
            num_kv_heads=2,
            head_dim=8,
            rope=RotaryEmbedding(8),
            q_norm=GemmaRMSNorm(8),
        )
