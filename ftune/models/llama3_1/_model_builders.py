"""Llama 3.1 model builders: the published sizes, nothing else."""

from ftune.models.llama3_1._component_builders import llama3_1
from ftune.modules.transformer import TransformerDecoder


def llama3_1_8b() -> TransformerDecoder:
    """Llama-3.1-8B, with the sizes of its published config.json."""
    return llama3_1(
        vocab_size=128_256,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        embed_dim=4096,
        intermediate_dim=14_336,
        max_seq_len=131_072,
    )


def llama3_1_70b() -> TransformerDecoder:
    """Llama-3.1-70B, with the sizes of its published config.json."""
    return llama3_1(
        vocab_size=128_256,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        embed_dim=8192,
        intermediate_dim=28_672,
        max_seq_len=131_072,
    )


def llama3_1_405b() -> TransformerDecoder:
    """Llama-3.1-405B, with the sizes of its published config.json."""
    return llama3_1(
        vocab_size=128_256,
        num_layers=126,
        num_heads=128,
        num_kv_heads=8,
        embed_dim=16_384,
        intermediate_dim=53_248,
        max_seq_len=131_072,
    )
