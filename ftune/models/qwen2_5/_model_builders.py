"""Qwen2.5 model builders: the published sizes, nothing else."""

from ftune.models.qwen2_5._component_builders import qwen2_5
from ftune.modules.transformer import TransformerDecoder


def qwen2_5_0_5b() -> TransformerDecoder:
    """Qwen2.5-0.5B, with the sizes of its published config.json."""
    return qwen2_5(
        vocab_size=151_936,
        num_layers=24,
        num_heads=14,
        num_kv_heads=2,
        embed_dim=896,
        intermediate_dim=4864,
        max_seq_len=32_768,
        tie_word_embeddings=True,
    )


def qwen2_5_1_5b() -> TransformerDecoder:
    """Qwen2.5-1.5B, with the sizes of its published config.json."""
    return qwen2_5(
        vocab_size=151_936,
        num_layers=28,
        num_heads=12,
        num_kv_heads=2,
        embed_dim=1536,
        intermediate_dim=8960,
        max_seq_len=32_768,
        tie_word_embeddings=True,
    )


def qwen2_5_3b() -> TransformerDecoder:
    """Qwen2.5-3B, with the sizes of its published config.json."""
    return qwen2_5(
        vocab_size=151_936,
        num_layers=36,
        num_heads=16,
        num_kv_heads=2,
        embed_dim=2048,
        intermediate_dim=11_008,
        max_seq_len=32_768,
        tie_word_embeddings=True,
    )


def qwen2_5_7b() -> TransformerDecoder:
    """Qwen2.5-7B, with the sizes of its published config.json."""
    return qwen2_5(
        vocab_size=152_064,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        embed_dim=3584,
        intermediate_dim=18_944,
        max_seq_len=32_768,
    )


def qwen2_5_14b() -> TransformerDecoder:
    """Qwen2.5-14B, with the sizes of its published config.json."""
    return qwen2_5(
        vocab_size=152_064,
        num_layers=48,
        num_heads=40,
        num_kv_heads=8,
        embed_dim=5120,
        intermediate_dim=13_824,
        max_seq_len=32_768,
    )


def qwen2_5_32b() -> TransformerDecoder:
    """Qwen2.5-32B(-Instruct), with the sizes of the instruct release's config.json (the base's norm eps is 1e-5)."""
    return qwen2_5(
        vocab_size=152_064,
        num_layers=64,
        num_heads=40,
        num_kv_heads=8,
        embed_dim=5120,
        intermediate_dim=27_648,
        max_seq_len=32_768,
    )


def qwen2_5_72b() -> TransformerDecoder:
    """Qwen2.5-72B(-Instruct), with the sizes of the instruct release's config.json (the base's norm eps is 1e-5)."""
    return qwen2_5(
        vocab_size=152_064,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        embed_dim=8192,
        intermediate_dim=29_568,
        max_seq_len=32_768,
    )
