"""Gemma model builders: the published sizes, nothing else."""

from ftune.models.gemma._component_builders import gemma
from ftune.modules.transformer import TransformerDecoder


def gemma_2b() -> TransformerDecoder:
    """Gemma-2B(-it), with the sizes of its published config.json (multi-query attention)."""
    return gemma(
        vocab_size=256_000,
        num_layers=18,
        num_heads=8,
        num_kv_heads=1,
        embed_dim=2048,
        intermediate_dim=16_384,
        max_seq_len=8192,
        head_dim=256,
    )


def gemma_7b() -> TransformerDecoder:
    """Gemma-7B(-it), with the sizes of its published config.json."""
    return gemma(
        vocab_size=256_000,
        num_layers=28,
        num_heads=16,
        num_kv_heads=16,
        embed_dim=3072,
        intermediate_dim=24_576,
        max_seq_len=8192,
        head_dim=256,
    )
