"""Mistral model builders: the published sizes, nothing else."""

from ftune.models.mistral._component_builders import mistral
from ftune.modules.transformer import TransformerDecoder


def mistral_7b() -> TransformerDecoder:
    """Mistral-7B-v0.1, with the sizes of its published config.json."""
    return mistral(
        vocab_size=32_000,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        embed_dim=4096,
        intermediate_dim=14_336,
        max_seq_len=32_768,
        sliding_window=4096,
    )
