"""Mixtral model builders: the published sizes (config.json of mistralai/Mixtral-<size>-v0.1 and its
Instruct releases, which share it), and a tiny one for tests."""

from ftune.models.mixtral._component_builders import mixtral
from ftune.modules.moe import MoETransformerDecoder


def mixtral_8x7b() -> MoETransformerDecoder:
    """Mixtral-8x7B: 46,702,792,704 parameters, 12,879,925,248 active (2 of 8 experts a token).

    config.json sets router_aux_loss_coef 0.02 and no sliding window.
    """
    return mixtral(
        vocab_size=32_000,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        embed_dim=4096,
        intermediate_dim=14_336,
        max_seq_len=32_768,
        aux_loss_coef=0.02,
    )


def mixtral_8x22b() -> MoETransformerDecoder:
    """Mixtral-8x22B: 140,630,071,296 parameters, 39,161,468,928 active (2 of 8 experts a token).

    The v3 vocabulary of 32,768 tokens (mistralai's release; mistral-community's earlier conversion
    of the torrent had 32,000); config.json sets router_aux_loss_coef 0.001, 64k context.
    """
    return mixtral(
        vocab_size=32_768,
        num_layers=56,
        num_heads=48,
        num_kv_heads=8,
        embed_dim=6144,
        intermediate_dim=16_384,
        max_seq_len=65_536,
        aux_loss_coef=0.001,
    )


def mixtral_tiny() -> MoETransformerDecoder:
    """A 2-layer, 8-expert Mixtral (top-2) for tests and demos; not a published model."""
    return mixtral(
        vocab_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        embed_dim=64,
        intermediate_dim=32,
        max_seq_len=256,
    )
