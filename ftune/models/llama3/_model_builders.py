"""Llama 3 model builders: the published sizes, nothing else."""

from ftune.models.llama3._component_builders import llama3
from ftune.modules.transformer import TransformerDecoder


def llama3_8b() -> TransformerDecoder:
    """Meta-Llama-3-8B, with the sizes of its published config.json."""
    return llama3(
        vocab_size=128_256,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        embed_dim=4096,
        intermediate_dim=14_336,
        max_seq_len=8192,
    )


def llama3_70b() -> TransformerDecoder:
    """Meta-Llama-3-70B, with the sizes of its published config.json."""
    return llama3(
        vocab_size=128_256,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        embed_dim=8192,
        intermediate_dim=28_672,
        max_seq_len=8192,
    )
