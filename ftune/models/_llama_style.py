"""The one decoder architecture every ftune family shares, with sizes and options as arguments.

Llama 2/3/3.1/3.2, Qwen2.5, Qwen3, Mistral and SmolLM2 differ only in numbers and in three switches
(q/k/v bias, q/k norm, tied output, Llama-3.1 RoPE scaling), so each family's component builder is a thin
wrapper over `llama_style_decoder` that fixes the family's traits and defaults.
"""

from torch import nn

from ftune.models._layer_parts import attention, check_kv_heads, gated_feed_forward, head_dim_of
from ftune.modules.decoder_layer import DecoderLayer
from ftune.modules.feed_forward import SwiGLU
from ftune.modules.rms_norm import RMSNorm
from ftune.modules.rope import Llama3RopeScaling, RotaryEmbedding
from ftune.modules.transformer import TransformerDecoder


def llama_style_decoder(
    *,
    builder: str,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    head_dim: int | None,
    rope_base: float,
    norm_eps: float,
    tie_word_embeddings: bool,
    qkv_bias: bool = False,
    qk_norm: bool = False,
    rope_scaling: Llama3RopeScaling | None = None,
    sliding_window: int | None = None,
) -> TransformerDecoder:
    """Build a pre-norm GQA + SwiGLU + RMSNorm + RoPE decoder.

    Args:
        builder: name of the calling family builder, used in error messages.
        vocab_size: embedding rows (HF `vocab_size`).
        num_layers: decoder layers (HF `num_hidden_layers`).
        num_heads: query heads (HF `num_attention_heads`).
        num_kv_heads: key/value heads (HF `num_key_value_heads`).
        embed_dim: model width (HF `hidden_size`).
        intermediate_dim: SwiGLU hidden width (HF `intermediate_size`).
        max_seq_len: trained context length (HF `max_position_embeddings`).
        head_dim: per-head size (HF `head_dim`); None = embed_dim // num_heads.
        rope_base: RoPE theta (HF `rope_theta`).
        norm_eps: RMSNorm epsilon (HF `rms_norm_eps`).
        tie_word_embeddings: reuse the embedding matrix as output projection (no `output` module).
        qkv_bias: give q/k/v projections a bias (Qwen2).
        qk_norm: an RMSNorm over each query and key head, before RoPE (Qwen3).
        rope_scaling: Llama-3.1 frequency scaling, or None.
        sliding_window: attention window in positions (Mistral v0.1), or None for full causal.

    Returns:
        The decoder, with freshly initialised weights on the current default device/dtype.

    Raises:
        ValueError: if the head counts and widths do not fit together.
    """
    head_dim = head_dim_of(builder, embed_dim=embed_dim, num_heads=num_heads, head_dim=head_dim)
    check_kv_heads(builder, num_heads=num_heads, num_kv_heads=num_kv_heads)
    # One RoPE module shared by every layer: it holds no parameters, only the frequencies.
    rope = RotaryEmbedding(head_dim, base=rope_base, scaling=rope_scaling)

    def layer() -> DecoderLayer:
        attn = attention(
            embed_dim=embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rope=rope,
            qkv_bias=qkv_bias,
            sliding_window=sliding_window,
            q_norm=RMSNorm(head_dim, norm_eps) if qk_norm else None,
            k_norm=RMSNorm(head_dim, norm_eps) if qk_norm else None,
        )
        return DecoderLayer(
            attn=attn,
            mlp=gated_feed_forward(SwiGLU, embed_dim, intermediate_dim),
            attn_norm=RMSNorm(embed_dim, norm_eps),
            mlp_norm=RMSNorm(embed_dim, norm_eps),
        )

    return TransformerDecoder(
        tok_embeddings=nn.Embedding(vocab_size, embed_dim),
        layers=nn.ModuleList(layer() for _ in range(num_layers)),
        norm=RMSNorm(embed_dim, norm_eps),
        output=None if tie_word_embeddings else nn.Linear(embed_dim, vocab_size, bias=False),
        max_seq_len=max_seq_len,
    )
