"""Gemma 3 (text) component builder: the architecture, with sizes as arguments.

Gemma 3 (Google, 2025), against the llama-style decoder: embeddings scaled by sqrt(embed_dim),
GeGLU feed-forward (tanh GELU), RMSNorms with a (1 + weight) scale before *and* after both
attention and feed-forward, a (1 + weight) RMSNorm over each query and key head, attention
scaled by query_pre_attn_scalar ** -0.5, tied embeddings, and layers that alternate between local
sliding-window attention (RoPE base 10k) and global attention (RoPE base 1M, linearly scaled in
the 4B and larger models): five local layers, then one global, repeated.
"""

from ftune.models._gemma_style import FULL, SLIDING, checked_layer_types, gemma_decoder, sandwich_layer
from ftune.models._layer_parts import attention, check_kv_heads
from ftune.modules.gemma_rms_norm import GemmaRMSNorm
from ftune.modules.linear_rope_scaling import LinearRopeScaling
from ftune.modules.rope import RotaryEmbedding
from ftune.modules.sandwich_decoder_layer import SandwichDecoderLayer
from ftune.modules.transformer import TransformerDecoder


def gemma3_layer_types(num_layers: int, sliding_window_pattern: int) -> list[str]:
    """HF's default layout: every `sliding_window_pattern`-th layer is global, the others local."""
    return [FULL if (i + 1) % sliding_window_pattern == 0 else SLIDING for i in range(num_layers)]


def gemma3(
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
    sliding_window_pattern: int = 6,
    layer_types: list[str] | None = None,
    rope_base: float = 1_000_000.0,
    local_rope_base: float = 10_000.0,
    rope_scaling_factor: float | None = None,
    norm_eps: float = 1e-6,
    tie_word_embeddings: bool = True,
) -> TransformerDecoder:
    """Build a Gemma 3 text decoder. Argument <- HF config.json key in brackets.

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
        sliding_window_pattern: every n-th layer is global [sliding_window_pattern]; used when
            `layer_types` is None.
        layer_types: "sliding_attention" or "full_attention" per layer [layer_types]; overrides the pattern.
        rope_base: RoPE theta of the global layers [rope_theta].
        local_rope_base: RoPE theta of the local layers [rope_local_base_freq].
        rope_scaling_factor: linear RoPE scaling of the global layers [rope_scaling.factor]; None = none.
        norm_eps: epsilon of every RMSNorm [rms_norm_eps].
        tie_word_embeddings: output projection reuses the embeddings [tie_word_embeddings].

    Returns:
        The model with freshly initialised weights, on the current default device and dtype.

    Raises:
        ValueError: for head counts that do not fit, or `layer_types` of the wrong length or values.
    """
    check_kv_heads("gemma3", num_heads=num_heads, num_kv_heads=num_kv_heads)
    if layer_types is None:
        layer_types = gemma3_layer_types(num_layers, sliding_window_pattern)
    checked_layer_types("gemma3", layer_types, num_layers)
    scaling = LinearRopeScaling(rope_scaling_factor) if rope_scaling_factor is not None else None
    # Two RoPE modules (frequencies only), each shared by the layers of its kind.
    ropes = {
        SLIDING: RotaryEmbedding(head_dim, base=local_rope_base),
        FULL: RotaryEmbedding(head_dim, base=rope_base, scaling=scaling),
    }

    def layer(kind: str) -> SandwichDecoderLayer:
        attn = attention(
            embed_dim=embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rope=ropes[kind],
            sliding_window=sliding_window if kind == SLIDING else None,
            q_norm=GemmaRMSNorm(head_dim, norm_eps),
            k_norm=GemmaRMSNorm(head_dim, norm_eps),
            softmax_scale=query_pre_attn_scalar**-0.5,
        )
        return sandwich_layer(attn, embed_dim=embed_dim, intermediate_dim=intermediate_dim, norm_eps=norm_eps)

    return gemma_decoder(
        vocab_size=vocab_size,
        embed_dim=embed_dim,
        norm_eps=norm_eps,
        tie_word_embeddings=tie_word_embeddings,
        max_seq_len=max_seq_len,
        layers=(layer(kind) for kind in layer_types),
    )
