"""Gemma (the first generation) component builder: the architecture, with sizes as arguments.

Gemma (Google, February 2024), against the llama-style decoder: embeddings scaled by
sqrt(embed_dim), GeGLU feed-forward (tanh GELU), RMSNorms with a (1 + weight) scale, a head_dim of
256 that is not embed_dim / num_heads in 7B, multi-query attention in 2B, tied embeddings. The
layer is llama's (a norm before attention and one before the feed-forward): Gemma 2 and 3 added the
norms after them, soft-capping and sliding windows.
"""

from torch import nn

from ftune.modules.attention import GroupedQueryAttention
from ftune.modules.decoder_layer import DecoderLayer
from ftune.modules.geglu import GeGLU
from ftune.modules.gemma_rms_norm import GemmaRMSNorm
from ftune.modules.rope import RotaryEmbedding
from ftune.modules.scaled_embedding import ScaledEmbedding
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
    if num_heads % num_kv_heads:
        raise ValueError(
            f"gemma(): num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})."
        )
    rope = RotaryEmbedding(head_dim, base=rope_base)  # frequencies only, shared by every layer

    def layer() -> DecoderLayer:
        attn = GroupedQueryAttention(
            q_proj=nn.Linear(embed_dim, num_heads * head_dim, bias=False),
            k_proj=nn.Linear(embed_dim, num_kv_heads * head_dim, bias=False),
            v_proj=nn.Linear(embed_dim, num_kv_heads * head_dim, bias=False),
            o_proj=nn.Linear(num_heads * head_dim, embed_dim, bias=False),
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rope=rope,
        )
        mlp = GeGLU(
            gate_proj=nn.Linear(embed_dim, intermediate_dim, bias=False),
            up_proj=nn.Linear(embed_dim, intermediate_dim, bias=False),
            down_proj=nn.Linear(intermediate_dim, embed_dim, bias=False),
        )
        return DecoderLayer(
            attn=attn,
            mlp=mlp,
            attn_norm=GemmaRMSNorm(embed_dim, norm_eps),
            mlp_norm=GemmaRMSNorm(embed_dim, norm_eps),
        )

    return TransformerDecoder(
        tok_embeddings=ScaledEmbedding(vocab_size, embed_dim, scale=embed_dim**0.5),
        layers=nn.ModuleList(layer() for _ in range(num_layers)),
        norm=GemmaRMSNorm(embed_dim, norm_eps),
        output=None if tie_word_embeddings else nn.Linear(embed_dim, vocab_size, bias=False),
        max_seq_len=max_seq_len,
    )
