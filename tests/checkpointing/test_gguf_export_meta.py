"""GGUF export metadata and layout (export_meta, export_tensors): every ftune family has a llama.cpp
architecture, an unknown one is refused with the list, the Gemma 2 query-scale rule of the 27B (which
no tiny model reaches) is llama.cpp's, and experts are stacked without a copy where they can be."""

from __future__ import annotations

import gguf
import pytest
import torch

from ftune.checkpointing.families import known_families
from ftune.checkpointing.gguf.export_meta import ARCHITECTURES, architecture, write_hparams
from ftune.checkpointing.gguf.export_tensors import gguf_tensors


def test_every_family_ftune_trains_has_a_llama_cpp_architecture() -> None:
    # A new family lands with its llama.cpp architecture here, or with a refusal that says why.
    assert sorted(ARCHITECTURES) == known_families()
    assert set(ARCHITECTURES.values()) <= set(gguf.MODEL_ARCH_NAMES.values())


def test_unknown_family_is_refused_with_the_exportable_ones() -> None:
    with pytest.raises(ValueError, match=r"model family 'bert' has no llama.cpp architecture .* llama2, "):
        architecture("bert")


def _gemma2(layers: int, hidden: int, head_dim: int, scalar: int) -> dict:
    return dict(
        model_type="gemma2", architectures=["Gemma2ForCausalLM"], vocab_size=256000, hidden_size=hidden,
        intermediate_size=4 * hidden, num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=16,
        head_dim=head_dim, query_pre_attn_scalar=scalar, sliding_window=4096, max_position_embeddings=8192,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, rms_norm_eps=1e-6,
    )  # fmt: skip


def test_gemma2_query_scale_is_head_dim_but_for_the_27b() -> None:
    # 27B: 46 layers, hidden 4608 / 32 heads = 144 = query_pre_attn_scalar, head_dim 128.
    write_hparams(gguf.GGUFWriter(None, "gemma2"), "gemma2", _gemma2(46, 4608, 128, 144), source="27b")
    write_hparams(gguf.GGUFWriter(None, "gemma2"), "gemma2", _gemma2(42, 3584, 256, 256), source="9b")
    with pytest.raises(
        ValueError, match="9b: this Gemma 2 model .* query_pre_attn_scalar is 144, llama.cpp derives 256"
    ):
        write_hparams(gguf.GGUFWriter(None, "gemma2"), "gemma2", _gemma2(42, 3584, 256, 144), source="9b")


def test_experts_stack_without_a_copy_when_they_are_views_of_one_tensor() -> None:
    stacked = torch.randn(4, 6, 3)  # (experts, ffn, hidden): ftune's layout, handed out as views
    gate = {f"model.layers.0.mlp.experts.{e}.gate_proj.weight": stacked[e, :2] for e in range(4)}
    up = {f"model.layers.0.mlp.experts.{e}.up_proj.weight": stacked[e, 2:] for e in range(4)}
    out = gguf_tensors({**gate, **up}, arch="qwen3moe", num_heads=1, num_kv_heads=1, num_layers=1)
    assert torch.equal(out["blk.0.ffn_gate_exps.weight"], stacked[:, :2])
    assert torch.equal(out["blk.0.ffn_up_exps.weight"], stacked[:, 2:])
    assert (
        out["blk.0.ffn_up_exps.weight"].untyped_storage().data_ptr() == stacked.untyped_storage().data_ptr()
    )
    copies = {k: v.clone() for k, v in up.items()}  # separate tensors: stacked into a new one
    again = gguf_tensors(copies, arch="qwen3moe", num_heads=1, num_kv_heads=1, num_layers=1)
    assert torch.equal(again["blk.0.ffn_up_exps.weight"], stacked[:, 2:])
    with pytest.raises(KeyError, match=r"expert indices \[0, 1, 3\] are not 0..2"):
        gguf_tensors(
            {k: v for k, v in up.items() if ".2." not in k},
            arch="qwen3moe",
            num_heads=1,
            num_kv_heads=1,
            num_layers=1,
        )
