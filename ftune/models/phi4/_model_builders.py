"""Phi-4 model builders: the published size, nothing else."""

from ftune.models.phi3._component_builders import phi3
from ftune.modules.transformer import TransformerDecoder


def phi4_14b() -> TransformerDecoder:
    """Phi-4 (14B), with the sizes of microsoft/phi-4's published config.json."""
    return phi3(
        vocab_size=100_352,
        num_layers=40,
        num_heads=40,
        num_kv_heads=10,
        embed_dim=5120,
        intermediate_dim=17_920,
        max_seq_len=16_384,
        rope_base=250_000.0,
    )
