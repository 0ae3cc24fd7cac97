"""Llama 2 model builders: the published sizes, nothing else."""

from ftune.models.llama2._component_builders import llama2
from ftune.modules.transformer import TransformerDecoder


def llama2_7b() -> TransformerDecoder:
    """Llama-2-7B, with the sizes of its published config.json."""
    return llama2(
        vocab_size=32_000,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        embed_dim=4096,
        intermediate_dim=11_008,
        max_seq_len=4096,
    )


def llama2_13b() -> TransformerDecoder:
    """Llama-2-13B, with the sizes of its published config.json."""
    return llama2(
        vocab_size=32_000,
        num_layers=40,
        num_heads=40,
        num_kv_heads=40,
        embed_dim=5120,
        intermediate_dim=13_824,
        max_seq_len=4096,
    )


def llama2_70b() -> TransformerDecoder:
    """Llama-2-70B, with the sizes of its published config.json."""
    return llama2(
        vocab_size=32_000,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        embed_dim=8192,
        intermediate_dim=28_672,
        max_seq_len=4096,
    )
