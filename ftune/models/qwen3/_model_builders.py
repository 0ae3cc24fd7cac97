"""Qwen3 model builders: the published dense sizes (config.json of Qwen/Qwen3-<size>), nothing else."""

from ftune.models.qwen3._component_builders import qwen3
from ftune.modules.transformer import TransformerDecoder


def qwen3_0_6b() -> TransformerDecoder:
    """Qwen3-0.6B, with the sizes of its published config.json (tied embeddings)."""
    return qwen3(
        vocab_size=151_936,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        embed_dim=1024,
        intermediate_dim=3072,
        max_seq_len=40_960,
        head_dim=128,
        tie_word_embeddings=True,
    )


def qwen3_1_7b() -> TransformerDecoder:
    """Qwen3-1.7B, with the sizes of its published config.json (tied embeddings)."""
    return qwen3(
        vocab_size=151_936,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        embed_dim=2048,
        intermediate_dim=6144,
        max_seq_len=40_960,
        head_dim=128,
        tie_word_embeddings=True,
    )


def qwen3_4b() -> TransformerDecoder:
    """Qwen3-4B, with the sizes of its published config.json (tied embeddings)."""
    return qwen3(
        vocab_size=151_936,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        embed_dim=2560,
        intermediate_dim=9728,
        max_seq_len=40_960,
        head_dim=128,
        tie_word_embeddings=True,
    )


def qwen3_8b() -> TransformerDecoder:
    """Qwen3-8B, with the sizes of its published config.json."""
    return qwen3(
        vocab_size=151_936,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        embed_dim=4096,
        intermediate_dim=12_288,
        max_seq_len=40_960,
        head_dim=128,
    )


def qwen3_14b() -> TransformerDecoder:
    """Qwen3-14B, with the sizes of its published config.json."""
    return qwen3(
        vocab_size=151_936,
        num_layers=40,
        num_heads=40,
        num_kv_heads=8,
        embed_dim=5120,
        intermediate_dim=17_408,
        max_seq_len=40_960,
        head_dim=128,
    )


def qwen3_32b() -> TransformerDecoder:
    """Qwen3-32B, with the sizes of its published config.json."""
    return qwen3(
        vocab_size=151_936,
        num_layers=64,
        num_heads=64,
        num_kv_heads=8,
        embed_dim=5120,
        intermediate_dim=25_600,
        max_seq_len=40_960,
        head_dim=128,
    )
