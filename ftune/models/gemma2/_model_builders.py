"""Gemma 2 model builders: the published sizes (config.json of google/gemma-2-<size>), nothing else."""

from ftune.models.gemma2._component_builders import gemma2
from ftune.modules.transformer import TransformerDecoder


def gemma2_2b() -> TransformerDecoder:
    """Gemma 2 2B(-it), with the sizes of its published config.json."""
    return gemma2(
        vocab_size=256_000,
        num_layers=26,
        num_heads=8,
        num_kv_heads=4,
        embed_dim=2304,
        intermediate_dim=9216,
        max_seq_len=8192,
        head_dim=256,
        sliding_window=4096,
        query_pre_attn_scalar=256,
    )


def gemma2_9b() -> TransformerDecoder:
    """Gemma 2 9B(-it), with the sizes of its published config.json."""
    return gemma2(
        vocab_size=256_000,
        num_layers=42,
        num_heads=16,
        num_kv_heads=8,
        embed_dim=3584,
        intermediate_dim=14_336,
        max_seq_len=8192,
        head_dim=256,
        sliding_window=4096,
        query_pre_attn_scalar=256,
    )


def gemma2_27b() -> TransformerDecoder:
    """Gemma 2 27B(-it), with the sizes of its published config.json (query_pre_attn_scalar is
    hidden_size / num_heads = 144, not head_dim)."""
    return gemma2(
        vocab_size=256_000,
        num_layers=46,
        num_heads=32,
        num_kv_heads=16,
        embed_dim=4608,
        intermediate_dim=36_864,
        max_seq_len=8192,
        head_dim=128,
        sliding_window=4096,
        query_pre_attn_scalar=144,
    )
