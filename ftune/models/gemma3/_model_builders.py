"""Gemma 3 model builders: the published text sizes (config.json of google/gemma-3-<size>), nothing else.

The 4B, 12B and 27B releases are image-text models; these builders are their text decoders (the
`text_config`), without the vision tower and projector.
"""

from ftune.models.gemma3._component_builders import gemma3
from ftune.modules.transformer import TransformerDecoder


def gemma3_270m() -> TransformerDecoder:
    """Gemma 3 270M, with the sizes of its published config.json."""
    return gemma3(
        vocab_size=262_144,
        num_layers=18,
        num_heads=4,
        num_kv_heads=1,
        embed_dim=640,
        intermediate_dim=2048,
        max_seq_len=32_768,
        head_dim=256,
        sliding_window=512,
        query_pre_attn_scalar=256,
    )


def gemma3_1b() -> TransformerDecoder:
    """Gemma 3 1B, with the sizes of its published config.json."""
    return gemma3(
        vocab_size=262_144,
        num_layers=26,
        num_heads=4,
        num_kv_heads=1,
        embed_dim=1152,
        intermediate_dim=6912,
        max_seq_len=32_768,
        head_dim=256,
        sliding_window=512,
        query_pre_attn_scalar=256,
    )


def gemma3_4b() -> TransformerDecoder:
    """Gemma 3 4B's text decoder, with the sizes of its published config.json (`text_config`)."""
    return gemma3(
        vocab_size=262_208,
        num_layers=34,
        num_heads=8,
        num_kv_heads=4,
        embed_dim=2560,
        intermediate_dim=10_240,
        max_seq_len=131_072,
        head_dim=256,
        sliding_window=1024,
        query_pre_attn_scalar=256,
        rope_scaling_factor=8.0,
    )


def gemma3_12b() -> TransformerDecoder:
    """Gemma 3 12B's text decoder, with the sizes of its published config.json (`text_config`)."""
    return gemma3(
        vocab_size=262_208,
        num_layers=48,
        num_heads=16,
        num_kv_heads=8,
        embed_dim=3840,
        intermediate_dim=15_360,
        max_seq_len=131_072,
        head_dim=256,
        sliding_window=1024,
        query_pre_attn_scalar=256,
        rope_scaling_factor=8.0,
    )


def gemma3_27b() -> TransformerDecoder:
    """Gemma 3 27B's text decoder, with the sizes of its published config.json (`text_config`)."""
    return gemma3(
        vocab_size=262_208,
        num_layers=62,
        num_heads=32,
        num_kv_heads=16,
        embed_dim=5376,
        intermediate_dim=21_504,
        max_seq_len=131_072,
        head_dim=128,
        sliding_window=1024,
        query_pre_attn_scalar=168,
        rope_scaling_factor=8.0,
    )
