"""The parts every family's decoder layer is made of, built the one way they all build them.

Each family's component builder (`_llama_style`, Gemma 1/2/3, Mixtral, Qwen3-MoE) stitches these
into its own layer: grouped-query attention over four bias-free projections (q/k/v biases as an
option), a gated feed-forward of three bias-free projections (SwiGLU or GeGLU), and the checks of
the head counts, with the calling builder's name in their messages.

The projections are made in the order q, k, v, o, then gate, up, down, as every builder made them
before: a seeded build draws the same random weights.
"""

from torch import nn

from ftune.modules.attention import GroupedQueryAttention
from ftune.modules.rope import RotaryEmbedding


def head_dim_of(builder: str, *, embed_dim: int, num_heads: int, head_dim: int | None) -> int:
    """`head_dim`, or embed_dim // num_heads when it is None.

    Raises:
        ValueError: head_dim is None and embed_dim is not a multiple of num_heads.
    """
    if head_dim is not None:
        return head_dim
    if embed_dim % num_heads:
        raise ValueError(
            f"{builder}(): embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}) "
            "unless head_dim is given explicitly."
        )
    return embed_dim // num_heads


def check_kv_heads(builder: str, *, num_heads: int, num_kv_heads: int) -> None:
    """Raises ValueError when num_heads is not a multiple of num_kv_heads (GQA shares each kv head)."""
    if num_heads % num_kv_heads:
        raise ValueError(
            f"{builder}(): num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})."
        )


def attention(
    *,
    embed_dim: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    rope: RotaryEmbedding,
    qkv_bias: bool = False,
    **options: object,
) -> GroupedQueryAttention:
    """Grouped-query attention with fresh q/k/v/o projections (HF's names; o never has a bias).

    Args:
        embed_dim, num_heads, num_kv_heads, head_dim: the sizes.
        rope: the RoPE module (frequencies only; layers share it).
        qkv_bias: q/k/v projections with a bias (Qwen2).
        **options: the rest of `GroupedQueryAttention`'s keyword arguments (sliding_window, q_norm,
            k_norm, softmax_scale, logit_softcap).
    """
    return GroupedQueryAttention(
        q_proj=nn.Linear(embed_dim, num_heads * head_dim, bias=qkv_bias),
        k_proj=nn.Linear(embed_dim, num_kv_heads * head_dim, bias=qkv_bias),
        v_proj=nn.Linear(embed_dim, num_kv_heads * head_dim, bias=qkv_bias),
        o_proj=nn.Linear(num_heads * head_dim, embed_dim, bias=False),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        rope=rope,
        **options,
    )


def gated_feed_forward(kind: type[nn.Module], embed_dim: int, hidden_dim: int) -> nn.Module:
    """`kind` (SwiGLU or GeGLU) over fresh bias-free gate, up and down projections."""
    return kind(
        gate_proj=nn.Linear(embed_dim, hidden_dim, bias=False),
        up_proj=nn.Linear(embed_dim, hidden_dim, bias=False),
        down_proj=nn.Linear(hidden_dim, embed_dim, bias=False),
    )
