"""Qwen3-MoE model builders: the published sizes (config.json of Qwen/Qwen3-<size>), and a tiny one for tests."""

from ftune.models.qwen3_moe._component_builders import qwen3_moe
from ftune.modules.moe import MoETransformerDecoder


def qwen3_moe_30b_a3b() -> MoETransformerDecoder:
    """Qwen3-30B-A3B: 30,532,122,624 parameters, 3,353,032,704 active (8 of 128 experts a token)."""
    return qwen3_moe(
        vocab_size=151_936,
        num_layers=48,
        num_heads=32,
        num_kv_heads=4,
        embed_dim=2048,
        intermediate_dim=6144,
        moe_intermediate_dim=768,
        num_experts=128,
        top_k=8,
        max_seq_len=40_960,
        head_dim=128,
    )


def qwen3_moe_235b_a22b() -> MoETransformerDecoder:
    """Qwen3-235B-A22B: 235,093,634,560 parameters, 22,190,763,520 active (8 of 128 experts a token)."""
    return qwen3_moe(
        vocab_size=151_936,
        num_layers=94,
        num_heads=64,
        num_kv_heads=4,
        embed_dim=4096,
        intermediate_dim=12_288,
        moe_intermediate_dim=1536,
        num_experts=128,
        top_k=8,
        max_seq_len=40_960,
        head_dim=128,
    )


def qwen3_moe_tiny() -> MoETransformerDecoder:
    """A 2-layer, 8-expert Qwen3-MoE (top-2) for tests and demos; not a published model."""
    return qwen3_moe(
        vocab_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        embed_dim=64,
        intermediate_dim=96,
        moe_intermediate_dim=32,
        num_experts=8,
        top_k=2,
        max_seq_len=256,
        head_dim=32,
    )
