"""Gemma (the first generation) component builder: the architecture, with sizes as arguments.

Gemma (Google, February 2024), against the llama-style decoder: embeddings scaled by
sqrt(embed_dim), GeGLU feed-forward (tanh GELU), RMSNorms with a (1 + weight) scale, a head_dim of
256 that is not embed_dim / num_heads in 7B, multi-query attention in 2B, tied embeddings. The
layer is llama's (a norm before attention and one before the feed-forward): Gemma 2 and 3 added the
norms after them, soft-capping and sliding windows.
"""

from ftune.models._gemma_style import gemma_decoder
from ftune.models._layer_parts import attention, check_kv_heads, gated_feed_forward
from ftune.modules.decoder_layer import DecoderLayer
from ftune.modules.geglu import GeGLU
from ftune.modules.gemma_rms_norm import GemmaRMSNorm
from ftune.modules.rope import RotaryEmbedding
from ftune.modules.transformer import TransformerDecoder


def gemma(
    *,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    head_dim: int,
    rope_base: float = 10_000.0,
    norm_eps: float = 1e-6,
    tie_word_embeddings: bool = True,
) -> TransformerDecoder:
    """Build a Gemma decoder. Argument <- HF config.json key in brackets.

    Args:
        vocab_size: embedding rows [vocab_size].
        num_layers: decoder layers [num_hidden_layers].
        num_heads: query heads [num_attention_heads].
        num_kv_heads: key/value heads [num_key_value_heads].
        embed_dim: model width [hidden_size].
        intermediate_dim: feed-forward width [intermediate_size].
        max_seq_len: trained context length [max_position_embeddings].
        head_dim: per-head size [head_dim].
        rope_base: RoPE theta [rope_theta].
        norm_eps: epsilon of every RMSNorm [rms_norm_eps].
        tie_word_embeddings: output projection reuses the embeddings [tie_word_embeddings].

    Returns:
        The model with freshly initialised weights, on the current default device and dtype.

    Raises:
        ValueError: if num_heads is not a multiple of num_kv_heads.
    """
    check_kv_heads("gemma", num_heads=num_heads, num_kv_heads=num_kv_heads)
    rope = RotaryEmbedding(head_dim, base=rope_base)  # frequencies only, shared by every layer

    def layer() -> DecoderLayer:
        return DecoderLayer(
            attn=attention(
                embed_dim=embed_dim,
                num_heads=num_heads,
                num_kv_heads=num_kv_heads,
                head_dim=head_dim,
                rope=rope,
            ),
            mlp=gated_feed_forward(GeGLU, embed_dim, intermediate_dim),
            attn_norm=GemmaRMSNorm(embed_dim, norm_eps),
            mlp_norm=GemmaRMSNorm(embed_dim, norm_eps),
        )

    return gemma_decoder(
        vocab_size=vocab_size,
        embed_dim=embed_dim,
        norm_eps=norm_eps,
        tie_word_embeddings=tie_word_embeddings,
        max_seq_len=max_seq_len,
        layers=(layer() for _ in range(num_layers)),
    )
