"""Llama 3.2 component builder: the architecture, with sizes as arguments.

Llama 3.2 text models (Meta, 2024): Llama 3.1 scaling with factor 32 and tied embeddings.
"""

from ftune.models._llama_style import llama_style_decoder
from ftune.modules.rope import Llama3RopeScaling
from ftune.modules.transformer import TransformerDecoder


def llama3_2(
    *,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    head_dim: int | None = None,
    rope_base: float = 500_000.0,
    norm_eps: float = 1e-5,
    tie_word_embeddings: bool = True,
    scale_factor: float = 32.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_seq_len: int = 8192,
) -> TransformerDecoder:
    """Build a Llama 3.2 decoder. Argument <- HF config.json key in brackets.

    Args:
        vocab_size: embedding rows [vocab_size].
        num_layers: decoder layers [num_hidden_layers].
        num_heads: query heads [num_attention_heads].
        num_kv_heads: key/value heads [num_key_value_heads].
        embed_dim: model width [hidden_size].
        intermediate_dim: feed-forward width [intermediate_size].
        max_seq_len: trained context length [max_position_embeddings].
        head_dim: per-head size [head_dim]; None = embed_dim // num_heads.
        rope_base: RoPE theta [rope_theta].
        norm_eps: RMSNorm epsilon [rms_norm_eps].
        tie_word_embeddings: output projection reuses the embeddings [tie_word_embeddings].
        scale_factor: RoPE scaling `factor` (HF `rope_scaling.factor`).
        low_freq_factor: HF `rope_scaling.low_freq_factor`.
        high_freq_factor: HF `rope_scaling.high_freq_factor`.
        original_max_seq_len: HF `rope_scaling.original_max_position_embeddings`.

    Returns:
        The model with freshly initialised weights, on the current default device and dtype.

    Raises:
        ValueError: if the head counts and widths do not fit together.
    """
    return llama_style_decoder(
        builder="llama3_2",
        vocab_size=vocab_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        embed_dim=embed_dim,
        intermediate_dim=intermediate_dim,
        max_seq_len=max_seq_len,
        head_dim=head_dim,
        rope_base=rope_base,
        norm_eps=norm_eps,
        tie_word_embeddings=tie_word_embeddings,
        rope_scaling=Llama3RopeScaling(
            factor=scale_factor,
            low_freq_factor=low_freq_factor,
            high_freq_factor=high_freq_factor,
            original_max_seq_len=original_max_seq_len,
        ),
    )
