"""Qwen2 model builders: the published dense sizes, nothing else.

The numbers are those of the instruct releases' config.json (as torchtune's builders): their
context is 32768 positions; the base releases state 131072 for 0.5B/1.5B/7B, which the same weights
reach only with YaRN scaling. Qwen2-57B-A14B is a mixture of experts (Qwen2MoeForCausalLM), not
this architecture.
"""

from ftune.models.qwen2._component_builders import qwen2
from ftune.modules.transformer import TransformerDecoder


def qwen2_0_5b() -> TransformerDecoder:
    """Qwen2-0.5B(-Instruct), with the sizes of its published config.json (tied embeddings)."""
    return qwen2(
        vocab_size=151_936,
        num_layers=24,
        num_heads=14,
        num_kv_heads=2,
        embed_dim=896,
        intermediate_dim=4864,
        max_seq_len=32_768,
        tie_word_embeddings=True,
    )


def qwen2_1_5b() -> TransformerDecoder:
    """Qwen2-1.5B(-Instruct), with the sizes of its published config.json (tied embeddings)."""
    return qwen2(
        vocab_size=151_936,
        num_layers=28,
        num_heads=12,
        num_kv_heads=2,
        embed_dim=1536,
        intermediate_dim=8960,
        max_seq_len=32_768,
        tie_word_embeddings=True,
    )


def qwen2_7b() -> TransformerDecoder:
    """Qwen2-7B(-Instruct), with the sizes of its published config.json."""
    return qwen2(
        vocab_size=152_064,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        embed_dim=3584,
        intermediate_dim=18_944,
        max_seq_len=32_768,
    )


def qwen2_72b() -> TransformerDecoder:
    """Qwen2-72B(-Instruct), with the sizes of the instruct release's config.json."""
    return qwen2(
        vocab_size=152_064,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        embed_dim=8192,
        intermediate_dim=29_568,
        max_seq_len=32_768,
    )
