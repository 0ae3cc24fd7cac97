"""Qwen3 component builder: the architecture, with sizes as arguments.

Qwen3 (Alibaba, 2025), dense models: Qwen2.5's decoder without q/k/v biases and with an RMSNorm
over each query and key head (q/k norm, before RoPE); head_dim is set explicitly (128), not
embed_dim // num_heads; the models up to 4B tie their embeddings.
"""

from torch import nn

from ftune.modules.attention import GroupedQueryAttention
from ftune.modules.decoder_layer import DecoderLayer
from ftune.modules.feed_forward import SwiGLU
from ftune.modules.rms_norm import RMSNorm
from ftune.modules.rope import RotaryEmbedding
from ftune.modules.transformer import TransformerDecoder


def qwen3(
    *,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    head_dim: int | None = None,
    rope_base: float = 1_000_000.0,
    norm_eps: float = 1e-6,
    tie_word_embeddings: bool = False,
) -> TransformerDecoder:
    """Build a Qwen3 decoder. Argument <- HF config.json key in brackets.

    Args:
        vocab_size: embedding rows [vocab_size].
        num_layers: decoder layers [num_hidden_layers].
        num_heads: query heads [num_attention_heads].
        num_kv_heads: key/value heads [num_key_value_heads].
        embed_dim: model width [hidden_size].
        intermediate_dim: feed-forward width [intermediate_size].
        max_seq_len: trained context length [max_position_embeddings].
        head_dim: per-head size [head_dim]; None = embed_dim // num_heads (HF's default). The
            published models set 128, which is not embed_dim // num_heads for all of them.
        rope_base: RoPE theta [rope_theta].
        norm_eps: epsilon of every RMSNorm, q/k norms included [rms_norm_eps].
        tie_word_embeddings: output projection reuses the embeddings [tie_word_embeddings].

    Returns:
        The model with freshly initialised weights, on the current default device and dtype.

    Raises:
        ValueError: if the head counts and widths do not fit together.
    """
    if num_heads % num_kv_heads:
        raise ValueError(
            f"qwen3(): num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})."
        )
    if head_dim is None:
        if embed_dim % num_heads:
            raise ValueError(
                f"qwen3(): embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}) "
                "unless head_dim is given explicitly."
            )
        head_dim = embed_dim // num_heads
    rope = RotaryEmbedding(head_dim, base=rope_base)  # shared by every layer: frequencies only

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
            q_norm=RMSNorm(head_dim, norm_eps),
            k_norm=RMSNorm(head_dim, norm_eps),
        )
        mlp = SwiGLU(
            gate_proj=nn.Linear(embed_dim, intermediate_dim, bias=False),
            up_proj=nn.Linear(embed_dim, intermediate_dim, bias=False),
            down_proj=nn.Linear(intermediate_dim, embed_dim, bias=False),
        )
        return DecoderLayer(
            attn=attn, mlp=mlp, attn_norm=RMSNorm(embed_dim, norm_eps), mlp_norm=RMSNorm(embed_dim, norm_eps)
        )

    return TransformerDecoder(
        tok_embeddings=nn.Embedding(vocab_size, embed_dim),
        layers=nn.ModuleList(layer() for _ in range(num_layers)),
        norm=RMSNorm(embed_dim, norm_eps),
        output=None if tie_word_embeddings else nn.Linear(embed_dim, vocab_size, bias=False),
        max_seq_len=max_seq_len,
    )
