"""Phi-3 model builders: the published sizes of Phi3ForCausalLM with the default RoPE, nothing else.

Phi-3-mini (3.8B) and Phi-3-medium (14B) in their 4k-context releases. The 128k releases and
Phi-3.5-mini use LongRoPE scaling, which ftune does not build (reading their config.json says so);
Phi-3-small is another architecture (Phi3SmallForCausalLM).
"""

from ftune.models.phi3._component_builders import phi3
from ftune.modules.transformer import TransformerDecoder


def phi3_3_8b() -> TransformerDecoder:
    """Phi-3-mini-4k(-instruct), with the sizes of its published config.json (torchtune's phi3_mini)."""
    return phi3(
        vocab_size=32_064,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        embed_dim=3072,
        intermediate_dim=8192,
        max_seq_len=4096,
        sliding_window=2047,
    )


def phi3_14b() -> TransformerDecoder:
    """Phi-3-medium-4k(-instruct), with the sizes of its published config.json."""
    return phi3(
        vocab_size=32_064,
        num_layers=40,
        num_heads=40,
        num_kv_heads=10,
        embed_dim=5120,
        intermediate_dim=17_920,
        max_seq_len=4096,
        sliding_window=2047,
    )
