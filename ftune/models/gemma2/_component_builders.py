"""Gemma 2 component builder: the architecture, with sizes as arguments.

Gemma 2 (Google, June 2024), against the first Gemma: RMSNorms with a (1 + weight) scale before
*and* after both attention and feed-forward, attention scaled by query_pre_attn_scalar ** -0.5,
attention scores soft-capped at ±attn_logit_softcap and output logits at ±final_logit_softcap
(cap * tanh(x / cap)), and layers that alternate between local sliding-window attention and global
attention, local first. Kept from Gemma: scaled embeddings, GeGLU (tanh GELU), tied embeddings,
one RoPE base for every layer. Gemma 3 later dropped the soft caps for q/k norms.
"""

from ftune.models._gemma_style import FULL, SLIDING, checked_layer_types, gemma_decoder, sandwich_layer
from ftune.models._layer_parts import attention, check_kv_heads
from ftune.modules.rope import RotaryEmbedding
from ftune.modules.sandwich_decoder_layer import SandwichDecoderLayer
from ftune.modules.transformer import TransformerDecoder


def gemma2_layer_types(num_layers: int) -> list[str]:
    """HF's default layout: local (sliding-window) and global layers alternate, local first."""
    return [SLIDING if i % 2 == 0 else FULL for i in range(num_layers)]


def gemma2(
    *,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    head_dim: int,
    sliding_window: int,
    query_pre_attn_scalar: float,
    attn_logit_softcap: float | None = 50.0,
    final_logit_softcap: float | None = 30.0,
    layer_types: list[str] | None = None,
    rope_base: float = 10_000.0,
    norm_eps: float = 1e-6,
    tie_word_embeddings: bool = True,
) -> TransformerDecoder:
    """Build a Gemma 2 decoder. Argument <- HF config.json key in brackets.

    Args:
        vocab_size: embedding rows [vocab_size].
        num_layers: decoder layers [num_hidden_layers].
        num_heads: query heads [num_attention_heads].
        num_kv_heads: key/value heads [num_key_value_heads].
        embed_dim: model width [hidden_size].
        intermediate_dim: feed-forward width [intermediate_size].
        max_seq_len: trained context length [max_position_embeddings].
        head_dim: per-head size [head_dim].
        sliding_window: positions a local layer's query attends to, its own included [sliding_window].
        query_pre_attn_scalar: attention logits are scaled by its inverse square root [query_pre_attn_scalar].
        attn_logit_softcap: cap of the scaled attention scores [attn_logit_softcapping]; None = none.
        final_logit_softcap: cap of the output logits [final_logit_softcapping]; None = none.
        layer_types: "sliding_attention" or "full_attention" per layer [layer_types]; None = alternate,
            local first (every released Gemma 2).
        rope_base: RoPE theta [rope_theta].
        norm_eps: epsilon of every RMSNorm [rms_norm_eps].
        tie_word_embeddings: output projection reuses the embeddings [tie_word_embeddings].

    Returns:
        The model with freshly initialised weights, on the current default device and dtype.

    Raises:
        ValueError: for head counts that do not fit, `layer_types` of the wrong length or values, or
            a cap that is not positive.
    """
    check_kv_heads("gemma2", num_heads=num_heads, num_kv_heads=num_kv_heads)
    if layer_types is None:
        layer_types = gemma2_layer_types(num_layers)
    checked_layer_types("gemma2", layer_types, num_layers)
    for name, cap in (
        ("attn_logit_softcap", attn_logit_softcap),
        ("final_logit_softcap", final_logit_softcap),
    ):
        if cap is not None and not cap > 0:
            raise ValueError(f"gemma2(): {name} must be a positive number or None (no cap), got {cap!r}.")
    rope = RotaryEmbedding(head_dim, base=rope_base)  # frequencies only, shared by every layer

    def layer(kind: str) -> SandwichDecoderLayer:
        attn = attention(
            embed_dim=embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rope=rope,
            sliding_window=sliding_window if kind == SLIDING else None,
            softmax_scale=query_pre_attn_scalar**-0.5,
            logit_softcap=attn_logit_softcap,
        )
        return sandwich_layer(attn, embed_dim=embed_dim, intermediate_dim=intermediate_dim, norm_eps=norm_eps)

    return gemma_decoder(
        vocab_size=vocab_size,
        embed_dim=embed_dim,
        norm_eps=norm_eps,
        tie_word_embeddings=tie_word_embeddings,
        max_seq_len=max_seq_len,
        layers=(layer(kind) for kind in layer_types),
        final_logit_softcap=final_logit_softcap,
    )
