"""SmolLM2 model builders: the published sizes, nothing else."""

from ftune.models.smollm2._component_builders import smollm2
from ftune.modules.transformer import TransformerDecoder


def smollm2_135m() -> TransformerDecoder:
    """SmolLM2-135M, with the sizes of its published config.json."""
    return smollm2(
        vocab_size=49_152,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        embed_dim=576,
        intermediate_dim=1536,
        max_seq_len=8192,
    )


def smollm2_360m() -> TransformerDecoder:
    """SmolLM2-360M, with the sizes of its published config.json."""
    return smollm2(
        vocab_size=49_152,
        num_layers=32,
        num_heads=15,
        num_kv_heads=5,
        embed_dim=960,
        intermediate_dim=2560,
        max_seq_len=8192,
    )


def smollm2_1_7b() -> TransformerDecoder:
    """SmolLM2-1.7B, with the sizes of its published config.json."""
    return smollm2(
        vocab_size=49_152,
        num_layers=24,
        num_heads=32,
        num_kv_heads=32,
        embed_dim=2048,
        intermediate_dim=8192,
        max_seq_len=8192,
        rope_base=130_000.0,
    )
