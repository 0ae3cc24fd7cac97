"""Pure state-dict converters: round trips, Meta's RoPE layout, ignored and unknown keys."""

import pytest
import torch

from ftune.models import COMPONENT_BUILDERS, CONVERTERS, FAMILIES
from ftune.models._meta_keys import from_meta_qk, to_meta_qk

META_FAMILIES = ["llama2", "llama3", "llama3_1", "llama3_2", "code_llama2"]
TINY = dict(
    vocab_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    embed_dim=32,
    intermediate_dim=48,
    max_seq_len=64,
)

# Builder arguments a family requires beyond TINY's.
TINY_EXTRA = {
    "gemma3": dict(head_dim=8, sliding_window=4, query_pre_attn_scalar=8),
    "qwen3_moe": dict(moe_intermediate_dim=16, num_experts=4, top_k=2),
    "gemma": dict(head_dim=8),
    "gemma2": dict(head_dim=8, sliding_window=4, query_pre_attn_scalar=8),
}


def tiny_state_dict(family: str, **overrides) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return COMPONENT_BUILDERS[family](**{**TINY, **TINY_EXTRA.get(family, {}), **overrides}).state_dict()


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_round_trip_is_exact_and_pure(family: str) -> None:
    sd = tiny_state_dict(family)
    before = dict(sd)
    conv = CONVERTERS[family]
    hf = conv.ftune_to_hf(sd)
    back = conv.hf_to_ftune(hf)
    assert_same(back, sd)
    assert sd == before and all(sd[k] is before[k] for k in sd)  # input untouched
    # qwen3_moe and mixtral stack their experts on the way in, phi3/phi4 fuse q/k/v and gate/up on the
    # way out (copies, checked above); every other family's conversion is a rename: no copies, no casts.
    if family not in ("qwen3_moe", "mixtral", "phi3", "phi4"):
        assert all(back[k] is sd[k] for k in sd)


@pytest.mark.parametrize("family", META_FAMILIES)
def test_meta_round_trip_is_exact(family: str) -> None:
    sd = tiny_state_dict(family)
    conv = CONVERTERS[family]
    meta = conv.ftune_to_meta(sd, num_heads=4, num_kv_heads=2)
    assert "layers.1.attention.wq.weight" in meta and "layers.1.feed_forward.w3.weight" in meta
    assert "output.weight" in meta  # Meta's reference model has no tying: tied models emit the embedding
    assert_same(conv.meta_to_ftune(meta, num_heads=4, num_kv_heads=2), sd)


def test_meta_tied_output_is_the_embedding_and_is_skipped_on_the_way_in() -> None:
    sd = tiny_state_dict("llama3_2")
    assert "output.weight" not in sd
    conv = CONVERTERS["llama3_2"]
    meta = conv.ftune_to_meta(sd, num_heads=4, num_kv_heads=2)
    assert meta["output.weight"] is sd["tok_embeddings.weight"]
    untied = conv.meta_to_ftune(meta, num_heads=4, num_kv_heads=2, tie_word_embeddings=False)
    assert torch.equal(untied["output.weight"], sd["tok_embeddings.weight"])


def _meta_rope(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Meta's reference RoPE: rotate adjacent pairs as complex numbers. x (s, h, d)."""
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).double())  # (s, h, d/2)
    angles = pos[:, None].double() * inv_freq.double()  # (s, d/2)
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)[:, None]).flatten(-2)


def test_meta_qk_permutation_gives_the_same_attention_scores() -> None:
    # Meta rotates (x[2i], x[2i+1]), ftune rotates (x[i], x[i+d/2]); after permuting wq/wk the
    # per-head query-key dot products (what attention sees) must agree.
    torch.manual_seed(0)
    num_heads, head_dim, dim, seq = 2, 8, 16, 5
    wq_meta, wk_meta = torch.randn(num_heads * head_dim, dim), torch.randn(num_heads * head_dim, dim)
    x, pos = torch.randn(seq, dim), torch.arange(seq) * 3
    from ftune.modules.rope import RotaryEmbedding

    rope = RotaryEmbedding(head_dim, base=10_000.0)
    q_meta = _meta_rope((x @ wq_meta.T).view(seq, num_heads, head_dim), pos, rope.inv_freq)
    k_meta = _meta_rope((x @ wk_meta.T).view(seq, num_heads, head_dim), pos, rope.inv_freq)
    q = (x @ from_meta_qk(wq_meta, num_heads).T).view(1, seq, num_heads, head_dim).transpose(1, 2)
    k = (x @ from_meta_qk(wk_meta, num_heads).T).view(1, seq, num_heads, head_dim).transpose(1, 2)
    q, k = rope(q, k, pos[None])
    scores_meta = torch.einsum("shd,thd->hst", q_meta, k_meta)
    scores = (q[0] @ k[0].transpose(-1, -2)).double()
    torch.testing.assert_close(scores, scores_meta, rtol=1e-4, atol=1e-3)
    assert torch.equal(to_meta_qk(from_meta_qk(wq_meta, num_heads), num_heads), wq_meta)


def test_ignored_keys_are_skipped_and_unknown_keys_raise() -> None:
    conv = CONVERTERS["llama3"]
    hf = conv.ftune_to_hf(tiny_state_dict("llama3"))
    hf["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    assert "layers.0.attn.rotary_emb.inv_freq" not in conv.hf_to_ftune(hf)
    assert "model.layers.{}.self_attn.rotary_emb.inv_freq" in conv.hf_ignored

    hf["model.layers.1.self_attn.q_proj.bias"] = torch.zeros(32)  # a Qwen2 tensor in a Llama checkpoint
    with pytest.raises(
        KeyError, match=r"llama3: unknown key 'model.layers.1.self_attn.q_proj.bias' \(pattern"
    ):
        conv.hf_to_ftune(hf)

    meta = conv.ftune_to_meta(tiny_state_dict("llama3"), num_heads=4, num_kv_heads=2)
    meta["rope.freqs"] = torch.ones(4)  # Llama 2 checkpoints ship this table
    assert conv.meta_to_ftune(meta, num_heads=4, num_kv_heads=2).keys() == tiny_state_dict("llama3").keys()
    meta["layers.0.attention.wqkv.weight"] = torch.ones(1)
    with pytest.raises(
        KeyError, match=r"unknown key 'layers.0.attention.wqkv.weight' .* in a Meta state dict"
    ):
        conv.meta_to_ftune(meta, num_heads=4, num_kv_heads=2)

    sd = tiny_state_dict("llama3")
    sd["layers.0.attn.q_proj.lora_a.weight"] = torch.ones(2, 32)
    with pytest.raises(KeyError, match=r"in a ftune state dict.*adapter \(lora_\*\) keys must be split off"):
        conv.ftune_to_hf(sd)


def test_qwen2_5_converts_qkv_biases() -> None:
    sd = tiny_state_dict("qwen2_5")
    assert "layers.0.attn.k_proj.bias" in sd and "layers.0.attn.o_proj.bias" not in sd
    hf = CONVERTERS["qwen2_5"].ftune_to_hf(sd)
    assert hf["model.layers.0.self_attn.k_proj.bias"] is sd["layers.0.attn.k_proj.bias"]


def test_lm_head_handling_for_tied_checkpoints() -> None:
    conv = CONVERTERS["smollm2"]
    hf = conv.ftune_to_hf(tiny_state_dict("smollm2", tie_word_embeddings=False))
    hf_copy = dict(hf, **{"lm_head.weight": hf["model.embed_tokens.weight"].clone()})
    assert "output.weight" in conv.hf_to_ftune(hf_copy)  # a real (untied) head is kept by default
    assert "output.weight" not in conv.hf_to_ftune(hf_copy, tie_word_embeddings=True)
    hf_alias = dict(hf, **{"lm_head.weight": hf["model.embed_tokens.weight"]})
    assert "output.weight" not in conv.hf_to_ftune(hf_alias)
    assert "output.weight" in conv.hf_to_ftune(hf_alias, tie_word_embeddings=False)


def test_meta_only_for_llama_families_and_head_counts_are_checked() -> None:
    assert [f for f in FAMILIES if CONVERTERS[f].supports_meta] == META_FAMILIES
    assert CONVERTERS["qwen2_5"].meta_to_ftune is None
    meta = CONVERTERS["llama2"].ftune_to_meta(tiny_state_dict("llama2"), num_heads=4, num_kv_heads=2)
    with pytest.raises(
        ValueError, match=r"layers.0.attention.wk.weight has 16 rows, which is not num_heads \(3\)"
    ):
        CONVERTERS["llama2"].meta_to_ftune(meta, num_heads=4, num_kv_heads=3)
