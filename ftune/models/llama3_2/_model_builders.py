"""Llama 3.2 model builders: the published sizes, nothing else."""

from ftune.models.llama3_2._component_builders import llama3_2
from ftune.modules.transformer import TransformerDecoder


def llama3_2_1b() -> TransformerDecoder:
    """Llama-3.2-1B, with the sizes of its published config.json."""
    return llama3_2(
        vocab_size=128_256,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        embed_dim=2048,
        intermediate_dim=8192,
        max_seq_len=131_072,
    )


def llama3_2_3b() -> TransformerDecoder:
    """Llama-3.2-3B, with the sizes of its published config.json."""
    return llama3_2(
        vocab_size=128_256,
        num_layers=28,
        num_heads=24,
        num_kv_heads=8,
        embed_dim=3072,
        intermediate_dim=8192,
        max_seq_len=131_072,
    )
